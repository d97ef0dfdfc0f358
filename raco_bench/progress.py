"""A one-line progress report for long commands (benchmarks, reports, calibration, audits).

``Progress("bench steptime", total)`` prints ``[bench steptime] [####....] 3/12, 41s elapsed, ETA 2m03s: <what>``
to stderr at most every ``every`` seconds (and always at the end), so a long command shows that it is
alive without flooding a log. The sweep console (:mod:`raco_bench.sweeps.console`) uses the same bar.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import TextIO


def duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    minutes, s = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{s:02d}s"
    hours, m = divmod(minutes, 60)
    return f"{hours}h{m:02d}m"


def bar(done: int, total: int, width: int = 24) -> str:
    filled = int(width * done / max(total, 1))
    return "[" + "#" * filled + "." * (width - filled) + "]"


@dataclass
class Progress:
    label: str
    total: int
    every: float = 5.0
    stream: TextIO = field(default_factory=lambda: sys.stderr)
    done: int = 0
    start: float = field(default_factory=time.monotonic)
    _last: float = -1e9

    def line(self, what: str = "") -> str:
        elapsed = time.monotonic() - self.start
        eta = duration(elapsed / self.done * (self.total - self.done)) if self.done else "?"
        return (f"[{self.label}] {bar(self.done, self.total)} {self.done}/{self.total}, {duration(elapsed)} elapsed, ETA {eta}"
                + (f": {what}" if what else ""))

    def advance(self, what: str = "", by: int = 1) -> None:
        self.done += by
        now = time.monotonic()
        if now - self._last >= self.every or self.done >= self.total:
            self._last = now
            print(self.line(what), file=self.stream, flush=True)
