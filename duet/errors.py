"""The errors duet's modules raise for bad input or a missing resource; ``duet.foundation.errors.cli`` reports them in
one line."""

from duet.foundation.errors import ToolError


class DuetError(ToolError):
    """Bad input or a missing resource in speech work (audio, manifests, models, settings), reported in one line
    naming the item (never a bug)."""


class AsrInputError(DuetError, ValueError):
    """Bad user input (missing file, malformed manifest line): reported as one line, no stack trace."""
