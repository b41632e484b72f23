"""Progress on stderr while a benchmark loads and runs: plain text, no dependency.

A run takes minutes (embedding thousands of memories, hundreds of queries through the
services); a silent terminal for that long reads as a hang. On a terminal the bar redraws in
place; into a file or pipe it prints a line every ``LOG_EVERY_S`` so logs stay short.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator, Sequence
from typing import TextIO, TypeVar

T = TypeVar("T")
BAR_WIDTH = 28  # characters
REDRAW_EVERY_S = 0.1
LOG_EVERY_S = 10.0


class Bar:
    def __init__(self, stream: TextIO | None, label: str, total: int) -> None:
        self.stream = stream
        self.label = label
        self.total = max(total, 0)
        self.done = 0
        self.started = time.monotonic()
        self._drawn = 0.0
        self._tty = bool(stream is not None and stream.isatty())
        self._draw(force=True)

    def advance(self, count: int = 1) -> None:
        self.done += count
        self._draw(force=False)

    def _line(self) -> str:
        elapsed = time.monotonic() - self.started
        share = self.done / self.total if self.total else 1.0
        filled = int(BAR_WIDTH * min(share, 1.0))
        bar = "#" * filled + "." * (BAR_WIDTH - filled)
        return f"{self.label} [{bar}] {self.done}/{self.total} {elapsed:.1f}s"

    def _draw(self, *, force: bool) -> None:
        if self.stream is None:
            return
        now = time.monotonic()
        interval = REDRAW_EVERY_S if self._tty else LOG_EVERY_S
        if not force and now - self._drawn < interval and self.done < self.total:
            return
        if self._tty:
            self.stream.write("\r" + self._line())
        elif force or self.done < self.total:
            self.stream.write(self._line() + "\n")
        self.stream.flush()
        self._drawn = now

    def close(self) -> None:
        if self.stream is None:
            return
        if self._tty:
            self.stream.write("\r" + self._line() + "\n")
        else:
            self.stream.write(self._line() + " done\n")
        self.stream.flush()


class Progress:
    """Makes bars on one stream (``None``: silent, for tests and ``--quiet`` callers)."""

    def __init__(self, stream: TextIO | None = sys.stderr) -> None:
        self.stream = stream

    def bar(self, label: str, total: int) -> Bar:
        return Bar(self.stream, label, total)

    def over(self, items: Sequence[T], label: str) -> Iterator[T]:
        bar = self.bar(label, len(items))
        for item in items:
            yield item
            bar.advance()
        bar.close()

    def note(self, message: str) -> None:
        if self.stream is not None:
            self.stream.write(message + "\n")
            self.stream.flush()


SILENT = Progress(None)
