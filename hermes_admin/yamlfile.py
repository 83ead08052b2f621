"""Every YAML file hermes-admin reads, read with bounds: size, expansion, depth.

The admin config, presets, each profile's `config.yaml` and each `plugin.yaml`
may come from anyone who can write them. A file is refused, with one line
naming it, when it is larger than MAX_BYTES, when its aliases would expand
past MAX_NODES values (a "billion laughs" bomb is a few hundred bytes that
unfold into billions: the composed graph is measured before anything walks
it), when it refers to itself, or when it nests deeper than Python can walk.
Refusing takes milliseconds and a few MB, whatever the file holds.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from functools import lru_cache

MAX_BYTES = 1 << 20  # Hermes' own config.yaml is a few KB
MAX_NODES = 100_000  # values once every alias is unfolded
MAX_DEPTH = 100  # nesting levels


class YAMLRefused(ValueError):
    """A YAML file that cannot be used; the message names the file and says why, briefly."""


@lru_cache(maxsize=1)
def _loader():
    """PyYAML's safe loader, bounded: imported on the first file read (a run without configs never pays)."""
    import yaml

    class BoundedLoader(yaml.SafeLoader):
        _depth = 0

        def compose_node(self, parent, index):
            self._depth += 1
            try:
                if self._depth > MAX_DEPTH:
                    raise YAMLRefused(f"nested over {MAX_DEPTH} levels deep")
                return super().compose_node(parent, index)
            finally:
                self._depth -= 1

        def compose_document(self):
            node = super().compose_document()
            _expanded_size(node)
            return node

    return yaml, BoundedLoader


def _expanded_size(root) -> int:
    """How many values the document holds once every alias is unfolded (memoized: linear in the file)."""
    yaml = _loader()[0]
    sizes: dict[int, int] = {}
    stack = [(root, False)]
    walking: set[int] = set()
    while stack:
        node, children_done = stack.pop()
        key = id(node)
        if key in sizes:
            continue
        children = ([v for pair in node.value for v in pair] if isinstance(node, yaml.MappingNode)
                    else node.value if isinstance(node, yaml.SequenceNode) else [])
        if children_done:
            walking.discard(key)
            total = 1 + sum(sizes[id(c)] for c in children)
            if total > MAX_NODES:
                raise YAMLRefused(f"its aliases unfold into over {MAX_NODES} values")
            sizes[key] = total
            continue
        if key in walking:
            raise YAMLRefused("an alias refers to a value that holds it")
        walking.add(key)
        stack.append((node, True))
        for c in children:
            if id(c) not in sizes:
                if id(c) in walking:
                    raise YAMLRefused("an alias refers to a value that holds it")
                stack.append((c, False))
    return sizes[id(root)]


def _bracket_depth(text: str) -> int:
    """How deep `[`/`{` nest, quotes ignored: PyYAML's scanner slows down with the flow level long
    before its composer could refuse the depth, so a pathological nest is refused unread."""
    depth = deepest = 0
    for ch in text:
        if ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth = max(0, depth - 1)
    return deepest


def parse(text: str, where: str):
    """The document in `text`; raises YAMLRefused naming `where`."""
    if _bracket_depth(text) > 2 * MAX_DEPTH:
        raise YAMLRefused(f"{where}: refused: nested over {MAX_DEPTH} levels deep")
    yaml, loader = _loader()
    try:
        return yaml.load(text, Loader=loader)
    except YAMLRefused as exc:
        raise YAMLRefused(f"{where}: refused: {exc}") from None
    except RecursionError:
        raise YAMLRefused(f"{where}: refused: nested over {MAX_DEPTH} levels deep") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise YAMLRefused(f"{where}: not valid YAML" + (f" (line {mark.line + 1})" if mark else "")) from None


def load(path: Path):
    """The document in the file at `path` (None for an empty file); OSError when it cannot be read."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)  # a fifo never blocks us
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise YAMLRefused(f"{path}: refused: not a plain file")
    with os.fdopen(fd, "rb") as source:
        if st.st_size > MAX_BYTES:
            raise YAMLRefused(f"{path}: refused: {st.st_size} bytes (at most {MAX_BYTES})")
        data = source.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise YAMLRefused(f"{path}: refused: over {MAX_BYTES} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise YAMLRefused(f"{path}: not UTF-8 text") from None
    return parse(text, str(path))


def load_mapping(path: Path, what: str = "a mapping of keys") -> dict:
    """A file that must hold a mapping (every config hermes-admin reads); YAMLRefused names the file,
    whether it cannot be read, is refused, or holds something else. An empty file is an empty mapping."""
    try:
        data = load(path)
    except OSError as exc:
        raise YAMLRefused(f"{path}: cannot read: {exc.strerror or exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise YAMLRefused(f"{path}: must be {what}, not {type(data).__name__}")
    return data
