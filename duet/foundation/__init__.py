"""duet.foundation: what every tool of the project stands on, below both packages.

``errors`` (the base of the errors a tool reports in one line, and ``cli`` that reports them), ``files`` (atomic
writes, JSON Lines, library output to a log), ``spelling`` (whole numbers as a reader says them) and
``tarfile_filter`` (tarfile's ``filter=`` keyword on a Python older than 3.11.4, for NeMo's unpacking); here, the
repository's paths and :func:`usable_cores`. The speech
package ``duet`` and the language-model package ``slm`` both import it; it imports nothing else of either (and
``duet/__init__.py`` nothing but it), so ``slm`` stays usable without the speech stack (imports run
duet.foundation <- slm <- duet <- entry scripts).
"""

import os
from pathlib import Path

#: Repository root (the folder holding ``pyproject.toml``); configs/ and samples/ are resolved from it.
REPO_ROOT = Path(__file__).resolve().parents[2]
#: Where every run writes (speech recognition and language model alike): experiments/<run name>/.
EXPERIMENTS = REPO_ROOT / "experiments"


def usable_cores() -> int:
    """The CPUs this process may run on (its affinity: what a container or ``taskset`` leaves it)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
