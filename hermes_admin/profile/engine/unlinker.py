"""Removing files in a process of its own (child.argv('hermes_admin.profile.engine.unlinker', FOLDER)).

Why a process: an unlink costs the kernel ~0.1 ms here, and a thread of the
engine's process must take the GIL back after each one, waiting on the
engine's Python work (several times slower per unlink beside the engine, and
the engine itself slower too). A process of its own waits
for nobody.

Protocol, on stdin: frames of `<length>\\n` then that many bytes, the paths
separated by NUL. For each frame, once its paths are handled (and the folder
synced, when no further frame is waiting), one line on stdout:
`{"removed": [index, ...], "skipped": [[index, why], ...]}`. EOF ends it.
"""

from __future__ import annotations

import json
import os
import select
import sys

from hermes_admin.profile.store.files import removable


def remove_batch(paths: list[str]) -> tuple[list[int], list[list]]:
    """Unlink each path that is a file or a link (the link itself: never its target, never a folder)."""
    removed, skipped = [], []
    for index, path in enumerate(paths):
        if not removable(path):
            continue  # a folder, or gone meanwhile
        try:
            os.unlink(path)
            removed.append(index)
        except FileNotFoundError:
            pass
        except OSError as exc:
            skipped.append([index, exc.strerror or str(exc)])
    return removed, skipped


def sync_folder(folder: str) -> None:
    """Put the removals themselves on disk (the folder's entries), outside any transaction."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems cannot sync a folder; the removals stand
    finally:
        os.close(fd)


def encode(paths: list[str]) -> bytes:
    payload = b"\0".join(os.fsencode(p) for p in paths)
    return b"%d\n" % len(payload) + payload


class _Frames:
    def __init__(self, fd: int):
        self.fd, self.buffer = fd, bytearray()

    def waiting(self) -> bool:
        """A frame (or its start) is already here: the folder sync can wait for it."""
        return bool(self.buffer) or bool(select.select([self.fd], [], [], 0)[0])

    def _fill(self) -> bool:
        chunk = os.read(self.fd, 1 << 20)
        self.buffer += chunk
        return bool(chunk)

    def next(self) -> list[str] | None:
        while b"\n" not in self.buffer:
            if not self._fill():
                return None
        head, _, _ = self.buffer.partition(b"\n")
        size = int(head)
        start = len(head) + 1
        while len(self.buffer) < start + size:
            if not self._fill():
                return None
        payload = bytes(self.buffer[start:start + size])
        del self.buffer[:start + size]
        return [os.fsdecode(p) for p in payload.split(b"\0")] if payload else []


def main(folder: str | None = None) -> int:
    folder = folder if folder is not None else sys.argv[2]
    frames = _Frames(sys.stdin.fileno())
    unsynced = False
    while (paths := frames.next()) is not None:
        removed, skipped = remove_batch(paths)
        unsynced = unsynced or bool(removed)
        if unsynced and not frames.waiting():
            sync_folder(folder)
            unsynced = False
        sys.stdout.write(json.dumps({"removed": removed, "skipped": skipped}) + "\n")
        sys.stdout.flush()
    if unsynced:
        sync_folder(folder)
    return 0

