"""Report lists that grow with the store, kept on disk past their first entries.

A run reports every unit it acted on, every session it looked at and kept, and
every file it removed: about 0.8 KB a session deleted, held until the report is
written (a W10 purge: 40 of its 77 MB). Peak RSS is to stay under 80 MB whatever
the store's size (BENCHMARKS.md), so past its first HEAD entries a list writes each new
entry as one line of JSON to an anonymous temporary file, and the report copies
those lines out as they are. Iterating reads them back.

If no temporary file can be made, the entries stay in memory: the report is
never lost for want of a scratch file.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Callable, Iterable, Iterator

HEAD = 256  # entries kept in memory before the rest goes to the file
READ_BYTES = 1 << 16  # a spill is read back in pieces this big, never whole


def _plain(value):
    return value.as_dict() if hasattr(value, "as_dict") else value


class Spill:
    """An append-only list; `decode` turns an entry read back into what was appended."""

    def __init__(self, items: Iterable = (), decode: Callable = lambda value: value):
        self._head: list = []
        self._file = None
        self._count = 0
        self._decode = decode
        self.extend(items)

    # -- writing ---------------------------------------------------------------

    def append(self, item) -> None:
        self._count += 1
        if self._file is None and len(self._head) < HEAD:
            self._head.append(item)
            return
        if self._file is None and not self._open():
            self._head.append(item)
            return
        self._file.write(self._encode(item) + "\n")

    def extend(self, items: Iterable) -> None:
        if isinstance(items, type(self)) and items._file is not None and (self._file is not None or self._open()):
            self._take_lines(items)  # file to file: the lines as they are, no decoding
            return
        for item in items:
            self.append(item)

    def __iadd__(self, items: Iterable) -> "Spill":
        self.extend(items)
        return self

    def _open(self) -> bool:
        try:
            self._file = tempfile.TemporaryFile("w+", encoding="utf-8", newline="\n")
        except OSError:
            return False
        return True

    def _take_lines(self, other: "Spill") -> None:
        for item in other._head:
            self.append(item)  # the file is open: they follow what is already there
        for line in other._lines():
            self._file.write(line + "\n")
            self._count += 1

    @staticmethod
    def _encode(item) -> str:
        return json.dumps(_plain(item))

    # -- reading ---------------------------------------------------------------

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0

    def __iter__(self) -> Iterator:
        yield from self._head
        for line in self._lines():
            yield self._parse(line)

    def _parse(self, line: str):
        return self._decode(json.loads(line))

    def _lines(self) -> Iterator[str]:
        """The file's lines, read with pread: the write position never moves, so a reader
        that stops half way leaves nothing for the next append to trip on."""
        if self._file is None:
            return
        self._file.flush()
        fd, offset, rest = self._file.fileno(), 0, b""
        while chunk := os.pread(fd, READ_BYTES, offset):
            offset += len(chunk)
            *lines, rest = (rest + chunk).split(b"\n")
            for line in lines:
                yield line.decode("utf-8")

    def encoded(self) -> Iterator[str]:
        """Each entry as JSON text, exactly as `json.dumps` writes it."""
        for item in self._head:
            yield self._encode(item)
        yield from self._lines()

    def as_dict(self):  # what a report that is not streamed (at a terminal) writes
        return list(self)


class SpillMap(Spill):
    """An append-only mapping (`kept`: session id -> why), written as one JSON object.

    Each entry is kept as the object member it becomes, `"key": value`. Keys are
    not checked for repeats: its callers add each session once.
    """

    def __init__(self, items=()):
        super().__init__()
        self.update(items)

    def __setitem__(self, key: str, value) -> None:
        self.append((key, value))

    def update(self, items) -> None:
        self.extend(items.items() if hasattr(items, "items") else items)

    def items(self) -> Iterator[tuple]:
        return iter(self)

    @staticmethod
    def _encode(item) -> str:
        return json.dumps(item[0]) + ": " + json.dumps(item[1])

    def _parse(self, line: str):
        return next(iter(json.loads("{" + line + "}").items()))

    def as_dict(self):
        return dict(self)
