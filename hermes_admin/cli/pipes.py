"""A closed stdout (`hermes-admin run | head -1`) is the reader's choice, not the command's failure.

Python raises BrokenPipeError on the first write after the reader went away, which would unwind
the command half-way, lose its exit code and hide what it still had to say on stderr. Instead,
the first EPIPE points stdout at /dev/null (the rest of the output goes nowhere, as it would have
been thrown away anyway) and the command finishes: its work, its messages on stderr and its
exit code are what they would be without the pipe, as with `set -o pipefail` in mind.
"""

from __future__ import annotations

import os
import sys


class PipeSafe:
    """sys.stdout, with EPIPE turned into "write to /dev/null from now on"."""

    def __init__(self, stream):
        self._stream = stream
        self.closed_by_reader = False

    def _reader_gone(self) -> None:
        self.closed_by_reader = True
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, self._stream.fileno())
        finally:
            os.close(devnull)
        try:
            self._stream.flush()  # what was buffered goes to /dev/null now
        except OSError:
            pass

    def write(self, text):
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._reader_gone()
            return len(text)

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def flush(self):
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._reader_gone()

    def __getattr__(self, name):
        return getattr(self._stream, name)


def guard_stdout() -> None:
    """stdout, and stderr too (`cmd 2>&1 | head -1` closes both at once)."""
    if not isinstance(sys.stdout, PipeSafe) and sys.stdout is not None:
        sys.stdout = PipeSafe(sys.stdout)
    if not isinstance(sys.stderr, PipeSafe) and sys.stderr is not None:
        sys.stderr = PipeSafe(sys.stderr)
