"""The error the ``slm`` package raises for bad input or a missing resource."""

from duet.foundation.errors import ToolError


class SlmError(ToolError):
    """Bad input or a missing resource in language-model work (data, config, model folder, generation settings),
    reported in one line naming the item by ``duet.foundation.errors.cli``."""
