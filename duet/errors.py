"""The project's error base class and the one-line form of a caught exception, defined in ``slm.errors``
(``slm`` must not import ``duet``, so the shared base lives there) and re-exported for duet's modules."""

from slm.errors import DuetError, cli, first_line

__all__ = ["DuetError", "cli", "first_line"]
