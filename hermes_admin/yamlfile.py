"""Every YAML file hermes-admin reads, read with bounds: size, expansion, depth.

The admin config, presets, each profile's `config.yaml` and each `plugin.yaml`
may come from anyone who can write them. A file is refused, with one line
naming it, when it is larger than MAX_BYTES, when its aliases would expand
past MAX_NODES values (a "billion laughs" bomb is a few hundred bytes that
unfold into billions: the composed graph is measured before anything walks
it), when it refers to itself, or when it nests deeper than Python can walk.
Refusing takes milliseconds and a few MB, whatever the file holds.

Files are parsed by libyaml where PyYAML has it: Hermes' own config.yaml
(15 KB, 700 lines) takes ~100 ms to compose in pure Python and ~7 ms in C, once
per profile and run. libyaml's composer recurses without a limit of its own, so
it is given only a text whose nesting is bounded (_nesting_bound, which counts
every bracket, quoted or not); anything else, a file libyaml finds invalid (PyYAML,
which Hermes uses, decides), and hosts without libyaml take the pure-Python
loader, which counts the depth as it goes. Bombs, self-reference and deep nests
are refused on both paths; where only some sections are built (a profile's
config.yaml), the libyaml path applies the bounds to those sections.
"""

from __future__ import annotations

import os
import re
from functools import lru_cache
from pathlib import Path

from hermes_admin.plain_files import NotPlain, open_plain

MAX_BYTES = 1 << 20  # Hermes' own config.yaml is a few KB
MAX_NODES = 100_000  # values once every alias is unfolded
MAX_DEPTH = 100  # nesting levels
C_NESTING = 1000  # the nesting bound (_nesting_bound) up to which libyaml composes: a few KB of C stack a level


class YAMLRefused(ValueError):
    """A YAML file that cannot be used; the message names the file and says why, briefly. `line`: the
    line YAML found the file invalid at, when it said (`config check` shows it as FILE:LINE)."""

    def __init__(self, message: str, line: int | None = None):
        super().__init__(message)
        self.line = line


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


def _expanded_size(root, max_depth: int = MAX_DEPTH) -> int:
    """How many values the document holds once every alias is unfolded, and how deep it nests
    (memoized: linear in the file); refuses past MAX_NODES values or `max_depth` levels."""
    yaml = _loader()[0]
    sizes: dict[int, int] = {}
    heights: dict[int, int] = {}
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
            height = 1 + max((heights[id(c)] for c in children), default=0)
            if height > max_depth:
                raise YAMLRefused(f"nested over {MAX_DEPTH} levels deep")
            sizes[key], heights[key] = total, height
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


def _nesting_bound(text: str, brackets: int) -> int:
    """A depth the document's nesting cannot exceed, from its text alone. A block collection inside another
    is indented further or opened by an indicator (`-`, `?`, `:`) on its line, or is a sequence under
    a key at the key's own indent (hence the 2x); a flow collection opens with a bracket (`brackets`:
    how many the text has, anywhere: a quoted `]` must not cancel a real `[`)."""
    deepest_line = 0
    for line in text.split("\n"):
        body = line.lstrip(" ")
        marks = body.count("-") + body.count(":") + body.count("?")
        deepest_line = max(deepest_line, len(line) - len(body) + marks)
    return 2 * deepest_line + brackets + 2


_BRACKET = re.compile(r"[\[\]{}]")  # what opens or closes a flow collection: counted for the nesting bound


def _bracket_depth(text: str) -> int:
    """How deep `[`/`{` nest, quotes ignored: PyYAML's scanner slows down with the flow level long
    before its composer could refuse the depth, so a pathological nest is refused unread."""
    depth = deepest = 0
    for bracket in _BRACKET.findall(text):
        if bracket in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth = max(0, depth - 1)
    return deepest


def parse(text: str, where: str, keys: frozenset[str] | None = None):
    """The document in `text`; raises YAMLRefused naming `where`. With `keys`, a mapping document
    yields only those top-level keys: the rest is read, never built into values."""
    if _bracket_depth(text) > 2 * MAX_DEPTH:
        raise YAMLRefused(f"{where}: refused: nested over {MAX_DEPTH} levels deep")
    yaml, bounded = _loader()
    fast = getattr(yaml, "CSafeLoader", None)
    try:
        if fast is not None and _nesting_bound(text, text.count("[") + text.count("{")) <= C_NESTING:
            try:
                return _read(yaml, fast(text), text, keys, measure=True)
            except yaml.YAMLError:
                pass  # libyaml and PyYAML differ on a few edge cases: PyYAML, as Hermes uses it, decides
        return _read(yaml, bounded(text), text, keys, measure=False)  # it measures as it composes
    except YAMLRefused as exc:
        raise YAMLRefused(f"{where}: refused: {exc}") from None
    except RecursionError:
        raise YAMLRefused(f"{where}: refused: nested over {MAX_DEPTH} levels deep") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark else None
        raise YAMLRefused(f"{where}: not valid YAML" + (f" (line {line})" if line else ""), line) from None
    except (ValueError, TypeError, KeyError, AttributeError, OverflowError) as exc:  # a tag whose value is not
        raise YAMLRefused(f"{where}: not valid YAML (a value: {type(exc).__name__})") from None


def _read(yaml, loader, text: str, keys: frozenset[str] | None, measure: bool):
    """The values of the document `loader` holds. `measure`: size and depth checked here (libyaml
    composes without counting), on what is built: with `keys` and no anchor in the text (so no
    alias), only the chosen sections, one level below the document (merge keys applied)."""
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if keys is None or not isinstance(node, yaml.MappingNode) or node.tag != "tag:yaml.org,2002:map":
            if measure:
                _expanded_size(node)
            return loader.construct_document(node)
        if measure and "&" in text:  # an alias may reach anything from anywhere: measure it all
            _expanded_size(node)
        loader.flatten_mapping(node)  # `<<` merge keys, as the constructor would apply them
        chosen = [(k.value, v) for k, v in node.value
                  if isinstance(k, yaml.ScalarNode) and k.tag == "tag:yaml.org,2002:str" and k.value in keys]
        if measure and "&" not in text:
            for _, value in chosen:
                _expanded_size(value, MAX_DEPTH - 1)
        return {name: loader.construct_object(value, deep=True) for name, value in chosen}  # the last wins
    finally:
        loader.dispose()


def load(path: Path, keys: frozenset[str] | None = None):
    """The document in the file at `path` (None for an empty file); OSError when it cannot be read."""
    return parse(text(path), str(path), keys)


def text(path: Path) -> str:
    """A YAML file's text, bounded, never waiting on a FIFO (also to find a key's line in it);
    OSError when it cannot be read, YAMLRefused when it is not a plain file of UTF-8 text."""
    try:  # a config may be a link (followed); a FIFO or a device there never blocks us
        fd = open_plain(path, follow=True)
    except NotPlain as exc:
        raise YAMLRefused(f"{path}: refused: {exc.strerror}") from None
    st = os.fstat(fd)
    with os.fdopen(fd, "rb") as source:
        if st.st_size > MAX_BYTES:
            raise YAMLRefused(f"{path}: refused: {st.st_size} bytes (at most {MAX_BYTES})")
        data = source.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise YAMLRefused(f"{path}: refused: over {MAX_BYTES} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise YAMLRefused(f"{path}: not UTF-8 text") from None


def load_mapping(path: Path, what: str = "a mapping of keys", keys: frozenset[str] | None = None,
                 text: str | None = None) -> dict:
    """A file that must hold a mapping (every config hermes-admin reads); YAMLRefused names the file,
    whether it cannot be read, is refused, or holds something else. An empty file is an empty mapping.
    `text`: the file's text, read already (yamlfile.text)."""
    try:
        data = load(path, keys) if text is None else parse(text, str(path), keys)
    except OSError as exc:
        raise YAMLRefused(f"{path}: cannot read: {exc.strerror or exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise YAMLRefused(f"{path}: must be {what}, not {type(data).__name__}")
    return data


def duplicate_keys(text: str, keys: frozenset[str] | None = None) -> list[tuple[str, int]]:
    """Each key written twice in one mapping (`sessions.retention_days`), with the line of the second:
    YAML readers (PyYAML, Hermes' and ours) silently take the last. With `keys`, only those top-level
    sections are looked into. For a text `parse` has read already (its bounds hold); [] for any other."""
    yaml, _ = _loader()
    loader_class = getattr(yaml, "CSafeLoader", None) or yaml.SafeLoader
    try:
        node = yaml.compose(text, Loader=loader_class)
    except (yaml.YAMLError, RecursionError, ValueError):
        return []
    found: list[tuple[str, int]] = []

    def walk(mapping, prefix: str, depth: int, only) -> None:
        if not isinstance(mapping, yaml.MappingNode) or depth > MAX_DEPTH:
            return
        seen = set()
        for key, value in mapping.value:
            if not isinstance(key, yaml.ScalarNode) or (only is not None and key.value not in only):
                continue
            name = prefix + key.value
            if key.value in seen and key.value != "<<":
                found.append((name, key.start_mark.line + 1))
            seen.add(key.value)
            walk(value, name + ".", depth + 1, None)

    walk(node, "", 0, keys)
    return found


def line_of(text: str, dotted: str) -> int | None:
    """The line (1-based) where a key path (`profiles.work.retention_days`) is written in a YAML text,
    found by reading the text for each key in turn, in block or flow style: for messages that name
    the line of a problem (`config check`), not for reading values."""
    line, start = None, 0
    lines = text.splitlines()
    for part in [p for p in dotted.split(".") if p]:
        pattern = re.compile(r"(^|[\s{,\-])['\"]?" + re.escape(part) + r"['\"]?\s*:")
        for n in range(start, len(lines)):
            if pattern.search(lines[n].split("#", 1)[0]):
                line, start = n + 1, n
                break
        else:
            return line
    return line
