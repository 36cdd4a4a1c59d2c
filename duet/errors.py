"""The project's error base class, and what a caught exception says in one line (for the one-line errors
every tool prints)."""

from __future__ import annotations


class DuetError(Exception):
    """Bad input or a missing resource that a tool reports in one line naming the item (never a bug)."""


def first_line(error: BaseException, limit: int = 200) -> str:
    """The first line of ``error``'s message (its type's name when it has none), at most ``limit`` characters.

    Library exceptions (NeMo, transformers, torch, the hub) often carry pages of detail; a tool's error
    names the item and gives the reason in one line.
    """
    text = str(error).strip()
    return text.splitlines()[0][:limit] if text else type(error).__name__
