"""How a long-running command says it is moving: the pace of its plain progress lines, a time left in words, and
the count a tool working through items prints. The training recipe (``duet.asr.recipe``), the demo's stage line
(``duet.demo.progress``) and the tools that label or extract speech all print through these."""

from __future__ import annotations

import sys
from typing import Callable, TextIO

#: Seconds between progress lines when the console is not a terminal (a log file, CI): at least one a minute.
PLAIN_EVERY_S = 30.0


def duration(seconds: float) -> str:
    """``45 s``, ``4 min``, ``1 h 05 min``: precise enough for a time left."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60:02d} min"


def count_printer(every: int, unit: str, out: TextIO | None = None) -> Callable[[int, int], None]:
    """A progress callback ``(done, total)`` for a tool working through items: prints ``  <done>/<total> <unit>``
    on ``out`` (default: standard error) every ``every`` items and at the last, so a long run shows it is moving."""
    def progress(done: int, total: int) -> None:
        if done % every == 0 or done == total:
            print(f"  {done}/{total} {unit}", file=sys.stderr if out is None else out, flush=True)
    return progress
