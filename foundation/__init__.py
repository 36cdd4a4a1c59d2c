"""foundation: what every tool of the project stands on, below both packages.

``errors`` (the base of the errors a tool reports in one line, and ``cli`` that reports them), ``files`` (atomic
writes, JSON Lines, library output to a log) and ``spelling`` (whole numbers as a reader says them). The speech
package ``duet`` and the language-model package ``slm`` both import it; it imports neither, so ``slm`` stays
usable without ``duet`` (imports run foundation <- slm <- duet <- entry scripts).
"""

from pathlib import Path

#: Repository root (the folder holding ``pyproject.toml``); configs/ and samples/ are resolved from it.
REPO_ROOT = Path(__file__).resolve().parent.parent
#: Where every run writes (speech recognition and language model alike): experiments/<run name>/.
EXPERIMENTS = REPO_ROOT / "experiments"
