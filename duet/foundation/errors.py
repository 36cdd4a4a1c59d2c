"""The base of the errors a tool reports in one line, the one-line form of a caught exception, and the wrapper
that turns such an error into ``prog: error: …`` for every entry script.

``duet.errors.DuetError`` and ``slm.errors.SlmError`` derive from ``ToolError``, so ``cli`` reports both.
"""

from __future__ import annotations

import errno
import functools
import os
import sys
from pathlib import Path
from typing import Callable, Sequence

Main = Callable[[Sequence[str] | None], int | None]


class ToolError(Exception):
    """Bad input or a missing resource that a tool reports in one line naming the item (never a bug)."""


#: The errors of a write that found the device full, or the user's quota spent
DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


def is_disk_full(error: BaseException | None) -> bool:
    return isinstance(error, OSError) and error.errno in DISK_FULL_ERRNOS


class DiskFullError(ToolError, OSError):
    """A write that found no space, reported as ``<path>: no space left on device`` (a full disk is no bug, and
    its traceback names a temporary file at best). Still an ``OSError`` with its errno and filename, so code that
    handles disk errors keeps working."""

    def __init__(self, path: str | os.PathLike | None, code: int = errno.ENOSPC):
        super().__init__(code, os.strerror(code), None if path is None else os.fspath(path))

    def __str__(self) -> str:
        reason = self.strerror[:1].lower() + self.strerror[1:]
        return f"{self.filename}: {reason}" if self.filename else reason


def first_line(error: BaseException, limit: int = 200) -> str:
    """The first line of ``error``'s message (its type's name when it has none), at most ``limit`` characters.

    Library exceptions (NeMo, transformers, torch, the hub) often carry pages of detail; a tool's error
    names the item and gives the reason in one line.
    """
    text = str(error).strip()
    return text.splitlines()[0][:limit] if text else type(error).__name__


def cli(main: Main) -> Main:
    """Decorate an entry script's ``main(argv)``: a ``ToolError`` it raises (a ``DuetError`` or an ``SlmError``)
    is printed on stderr as ``<script name>: error: <message>`` (argparse's form) and ``main`` returns 2,
    argparse's status for bad usage; so is an ``OSError`` of a full disk, naming its path. Any other exception is a
    bug and keeps its traceback."""
    prog = Path(main.__code__.co_filename).stem

    @functools.wraps(main)
    def run(argv: Sequence[str] | None = None) -> int | None:
        try:
            return main(argv)
        except ToolError as e:
            print(f"{prog}: error: {e}", file=sys.stderr)
            return 2
        except OSError as e:  # a write outside duet.foundation.files' helpers (a checkpoint, a log)
            if not is_disk_full(e):
                raise
            print(f"{prog}: error: {DiskFullError(e.filename, e.errno)}", file=sys.stderr)
            return 2

    return run
