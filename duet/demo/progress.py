"""How far a running demo stage has got, read from the log its command writes, and the console line that says so
(its pace and time left in words from ``duet.foundation.progress``).

A stage's command writes everything it prints to ``experiments/<stage>/log.txt`` (``duet.demo.stages``), so the demo
learns its progress from there, without the command's cooperation:

* ``nemo_recipes/finetune_ctc.py``'s progress lines: ``finetune_ctc: epoch 2/4, step 60/204 (29 %), loss ...``
  (and ``training done at step 204`` after them);
* Lightning's training bar (a Lightning command run with ``--verbose``): ``Epoch 2:  45%|████▌     | 45/99
  [01:23<01:40, ...]`` redrawn with carriage returns; with the stage's ``trainer.max_epochs`` this is step 243 of
  594 in all;
* ``slm/finetune.py``'s progress lines: ``step 40/2556  epoch 0.19  loss ...``;
* any other tqdm bar with a known total (``Transcribing: 30%|...| 3/10 [...]``).

Time left is extrapolated from this stage's own pace since its first reading (pauses for validation between
epochs included), never from a figure measured elsewhere; until the count has moved it says so.
"""

from __future__ import annotations

import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from duet.foundation.progress import PLAIN_EVERY_S, duration

# Lightning's training bar: "Epoch 3:  45%|...| 45/99 [" (the epoch counts from 0)
TRAIN_BAR = re.compile(r"Epoch (\d+):\s*\d+%\|[^|]*\|\s*(\d+)/(\d+) \[")
# finetune_ctc.py's progress line ("epoch 2/4, step 60/204") and slm/finetune.py's ("step 40/2556")
STEP_LINE = re.compile(r"\b(?:(epoch \d+(?:/\d+)?), )?step (\d+)/(\d+)\b")
# any tqdm bar: "<what>: 30%|...| 3/10 [" or, total unknown, "<what>: |...| 3/? ["
OTHER_BAR = re.compile(r"([A-Za-z][\w .-]{0,40}):\s*(?:\d+%)?\|[^|]*\|\s*(\d+)/(\d+|\?) \[")
# what NeMo/Lightning print once training has ended (the recipe then scores the test set and saves)
TRAINING_ENDED = ("`Trainer.fit` stopped", "finetune_ctc: training done at step")
ENDED_PHASE = "training done: scoring the test set and saving"


@dataclass(frozen=True)
class Reading:
    """Where the stage stands: ``done`` of ``total`` units, and how to say so."""

    done: int
    total: int
    what: str  # "epoch 2/6, step 243/594", "step 40/2556", "Transcribing 3/10"
    phase: str | None = None  # "validating", "training done: testing and saving", ...


class LogProgress:
    """Reads a stage's log as it grows (only the new bytes each time) and keeps its latest :class:`Reading`.

    ``epochs``: the ``trainer.max_epochs`` of a Lightning training command, so that its per-epoch bar becomes
    steps of the whole run."""

    def __init__(self, log_path: Path, epochs: int | None = None):
        self.log_path = log_path
        self.epochs = epochs
        self._offset = 0
        self._tail = ""  # text after the last line break or carriage return: a bar may still be half written
        self._train: tuple[int, int, int] | None = None  # epoch (from 0), step in it, steps an epoch
        self._steps: tuple[int, int, str | None] | None = None  # done, total, the epoch said with them
        self._bar: tuple[str, int, int | None] | None = None  # the latest non-training bar
        self._bar_is_latest = False
        self._ended = False
        self._pace: tuple[int, float, int] | None = None  # (total, time, done) at the first reading of that total
        self.reading: Reading | None = None

    def poll(self, now: float | None = None) -> Reading | None:
        """Read what the log gained since the last call; the latest reading (None until there is one)."""
        now = time.monotonic() if now is None else now
        try:
            size = self.log_path.stat().st_size
            if size < self._offset:  # the log was started afresh
                self._offset, self._tail = 0, ""
            with open(self.log_path, "rb") as log:
                log.seek(self._offset)
                new = log.read()
        except FileNotFoundError:
            return self.reading
        self._offset += len(new)
        pieces = re.split(r"[\r\n]", self._tail + new.decode("utf-8", errors="replace"))
        self._tail = pieces[-1]
        for piece in pieces:  # the unfinished tail is read too (and again next time): bars end without a newline
            self._parse(piece)
        self.reading = self._reading()
        if self.reading is not None and (self._pace is None or self._pace[0] != self.reading.total):
            self._pace = (self.reading.total, now, self.reading.done)
        return self.reading

    def _parse(self, text: str) -> None:
        if any(marker in text for marker in TRAINING_ENDED):
            self._ended = True
        for match in TRAIN_BAR.finditer(text):
            self._train = tuple(int(g) for g in match.groups())
            self._bar_is_latest = False
        for match in STEP_LINE.finditer(text):
            self._steps = (int(match.group(2)), int(match.group(3)), match.group(1))
            self._bar_is_latest = False
        for match in OTHER_BAR.finditer(text):
            what = match.group(1).strip()
            if what.startswith("Epoch"):
                continue
            total = None if match.group(3) == "?" else int(match.group(3))
            self._bar, self._bar_is_latest = (what, int(match.group(2)), total), True

    def _reading(self) -> Reading | None:
        phase = None
        if self._bar is not None and self._bar_is_latest:
            what, n, total = self._bar
            phase = "validating" if what.startswith("Validation") else f"{what} {n}/{total or '?'}"
        if self._train is not None:
            epoch, n, per_epoch = self._train
            if self._ended:
                phase = ENDED_PHASE
            if self.epochs:
                done, total = epoch * per_epoch + n, self.epochs * per_epoch
                return Reading(done, total, f"epoch {epoch + 1}/{self.epochs}, step {done}/{total}", phase)
            return Reading(n, per_epoch, f"epoch {epoch + 1}, step {n}/{per_epoch} of it", phase)
        if self._steps is not None:
            done, total, epoch = self._steps
            if self._ended:
                phase = ENDED_PHASE
            return Reading(done, total, (f"{epoch}, " if epoch else "") + f"step {done}/{total}", phase)
        if self._bar is not None and self._bar[2]:
            what, n, total = self._bar
            return Reading(n, total, f"{what} {n}/{total}")
        return None

    def seconds_left(self, now: float | None = None) -> float | None:
        """Time left at this stage's own pace since its first reading; None until the count has moved."""
        now = time.monotonic() if now is None else now
        if self.reading is None or self._pace is None:
            return None
        _, since, first_done = self._pace
        moved, spent = self.reading.done - first_done, now - since
        if moved <= 0 or spent <= 0:
            return None
        return max(0.0, (self.reading.total - self.reading.done) * spent / moved)

    def describe(self, now: float | None = None) -> str | None:
        """``epoch 2/6, step 243/594 (41 %), about 6 min left`` (None before the first reading)."""
        reading = self.reading
        if reading is None:
            return None
        parts = [reading.what + (f" ({100 * reading.done / reading.total:.0f} %)" if reading.total else "")]
        if reading.phase:
            parts.append(reading.phase)
        if not self._ended:
            left = self.seconds_left(now)
            parts.append("time left: measuring the pace" if left is None else f"about {duration(left)} left")
        return ", ".join(parts)


class ConsoleProgress:
    """The demo's line for a running stage, given the seconds elapsed about once a second (``duet.demo.stages.run_logged``'s
    ``on_tick``): on a terminal one line redrawn in place; elsewhere (a file, CI) a new line every
    ``PLAIN_EVERY_S`` seconds, so a long stage is never silent for a minute."""

    def __init__(self, progress: LogProgress, out: TextIO, terminal: bool, every_s: float | None = None):
        self.progress = progress
        self.out = out
        self.terminal = terminal
        self.every_s = PLAIN_EVERY_S if every_s is None else every_s
        self._last_line = 0.0
        self._width = 0

    def line(self, seconds: float) -> str:
        self.progress.poll()
        state = self.progress.describe()
        minutes, secs = divmod(int(seconds), 60)
        return f"  running {minutes}:{secs:02d}" + (f": {state}" if state else "")

    def __call__(self, seconds: float) -> None:
        if self.terminal:
            text = self.line(seconds)[: shutil.get_terminal_size().columns - 1]
            print("\r" + text.ljust(self._width), end="", file=self.out, flush=True)
            self._width = len(text)
        elif seconds - self._last_line >= self.every_s:
            self._last_line = seconds
            print(self.line(seconds), file=self.out, flush=True)

    def clear(self) -> None:
        if self.terminal and self._width:
            print("\r" + " " * self._width + "\r", end="", file=self.out, flush=True)
