"""Plain files read where someone else may have put anything: never waited on, never through a link
unless asked.

A home's owner may put anything where a file of ours, a config or a command is expected: a FIFO, a
device, a link to another user's file, a file of gigabytes. Every such file (records, export
manifests and exports, config texts, a command's shebang, and through `yamlfile.py` every YAML
file, the admin config's included) is opened here: without blocking, without becoming our
terminal, its type checked on the descriptor itself, and read up to a bound; anything else is one
line naming the file (docs/design.md §10).

At the package's bottom: it imports nothing of hermes-admin, so the engine, the installation
finder, the jobs and the YAML reader all read through it.
"""

from __future__ import annotations

import errno
import os
import stat


class UnsafePath(OSError):
    """A path of ours inside a home that is a link, a file where a folder belongs, or not ours."""


class NotPlain(UnsafePath):
    """A file we were to read that is not a plain file (a FIFO, a device, a folder, a link) or is too
    large: said in one line naming it, never waited on."""


def open_plain(path, follow: bool = False) -> int:
    """A descriptor of the plain file at `path`, for reading. Opened without blocking (a FIFO or a
    device never holds us up: O_NONBLOCK), without becoming our terminal, never through a link in
    the last component unless `follow`; its type is checked on the descriptor itself (no window to
    swap the file between a look and the open). Raises NotPlain (or the OSError of the open)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow:
            raise NotPlain(errno.ELOOP, "is a symlink; not read", str(path)) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotPlain(errno.EINVAL, f"is not a plain file ({_kind(st.st_mode)}); not read", str(path))
        os.set_blocking(fd, True)  # a plain file's reads never wait on anyone: ordinary reads from here
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_plain(path, limit: int, follow: bool = False, head: bool = False) -> bytes:
    """The bytes of the plain file at `path` (open_plain), at most `limit`: a larger file raises
    NotPlain, or with `head` gives its first `limit` bytes."""
    fd = open_plain(path, follow)
    try:
        data = os.read(fd, limit + 1) if limit < (1 << 20) else _read_all(fd, limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        if head:
            return data[:limit]
        raise NotPlain(errno.EFBIG, f"is over {limit} bytes; not read", str(path))
    return data


def _read_all(fd: int, limit: int) -> bytes:
    chunks, size = [], 0
    while size < limit and (chunk := os.read(fd, min(1 << 20, limit - size))):
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _kind(mode: int) -> str:
    return ("a FIFO" if stat.S_ISFIFO(mode) else "a folder" if stat.S_ISDIR(mode) else
            "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else
            "not a regular file")
