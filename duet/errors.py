"""The project's error base class and the one-line form of a caught exception, defined in ``slm.errors``
(``slm`` must not import ``duet``, so the shared base lives there) and re-exported for duet's modules, and
the error for bad speech-recognition input that several duet modules raise."""

from slm.errors import DuetError, cli, first_line

__all__ = ["AsrInputError", "DuetError", "cli", "first_line"]


class AsrInputError(DuetError, ValueError):
    """Bad user input (missing file, malformed manifest line): reported as one line, no stack trace."""
