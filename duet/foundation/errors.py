"""The base of the errors a tool reports in one line, the one-line form of a caught exception, and the wrapper
that turns such an error into ``prog: error: …`` for every entry script.

``duet.errors.DuetError`` and ``slm.errors.SlmError`` derive from ``ToolError``, so ``cli`` reports both.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Callable, Sequence

Main = Callable[[Sequence[str] | None], int | None]


class ToolError(Exception):
    """Bad input or a missing resource that a tool reports in one line naming the item (never a bug)."""


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
    argparse's status for bad usage. Any other exception is a bug and keeps its traceback."""
    prog = Path(main.__code__.co_filename).stem

    @functools.wraps(main)
    def run(argv: Sequence[str] | None = None) -> int | None:
        try:
            return main(argv)
        except ToolError as e:
            print(f"{prog}: error: {e}", file=sys.stderr)
            return 2

    return run
