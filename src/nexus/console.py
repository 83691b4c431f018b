"""Console output that a reader going away cannot stop: `nexus train ... | head -2` must still train,
save and exit with the run's own status, not end at the first write after `head` quits.

Python ignores SIGPIPE, so a write to a closed pipe raises BrokenPipeError wherever it happens (a
progress line, a note, the final flush). `keep_running_without_reader()` wraps stdout and stderr so
that the first such error points the stream's file descriptor at /dev/null: later output goes
nowhere and the command carries on. Written by hand: neither the standard library nor tqdm has this
(tqdm itself writes through `sys.stdout` / `sys.stderr` as it finds them at each call).
"""

from __future__ import annotations

import os
import sys


class _ReaderMayLeave:
    """A text stream whose writes and flushes survive a closed pipe (the rest is the stream's own)."""

    def __init__(self, stream):
        self._stream = stream
        self.reader_left = False  # True once output goes to /dev/null

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._to_devnull()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._to_devnull()

    def _to_devnull(self) -> None:
        self.reader_left = True
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, self._stream.fileno())
        finally:
            os.close(null)
        try:  # what was buffered for the gone reader drains into /dev/null
            self._stream.flush()
        except OSError:
            pass

    def __getattr__(self, name):
        return getattr(self._stream, name)


def keep_running_without_reader() -> None:
    """Wrap sys.stdout and sys.stderr (once) so a closed pipe never stops the process."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, _ReaderMayLeave) and _has_fd(stream):
            setattr(sys, name, _ReaderMayLeave(stream))


def _has_fd(stream) -> bool:
    try:
        stream.fileno()
    except (AttributeError, OSError, ValueError):  # pytest's capture, io.StringIO: no pipe to lose
        return False
    return True
