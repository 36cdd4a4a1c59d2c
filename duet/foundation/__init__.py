"""duet.foundation: what every tool of the project stands on, below both packages.

``errors`` (the base of the errors a tool reports in one line, and ``cli`` that reports them), ``files`` (atomic
writes, JSON Lines, library output to a log), ``spelling`` (whole numbers as a reader says them), ``progress`` (a long
command's progress lines), ``token_rows`` (token ids padded into a batch) and ``tarfile_filter`` (tarfile's
``filter=`` keyword on a Python older than 3.11.4, for NeMo's unpacking); here, the repository's paths,
:func:`usable_cores` and :func:`python_command` (a command to print in a hint). The paths work from a checkout and from
an installed package alike (CHECKOUT, SAMPLES_DIR, CONFIG_DIR, PROJECT_DIR below). The speech
package ``duet`` and the language-model package ``slm`` both import it; it imports nothing else of either (and
``duet/__init__.py`` nothing but it), so ``slm`` stays usable without the speech stack (imports run
duet.foundation <- slm <- duet <- entry scripts).
"""

import os
import shlex
import shutil
import sys
from pathlib import Path

_PACKAGE = Path(__file__).resolve().parents[1]  # duet/
#: Environment variable naming the project folder (see PROJECT_DIR).
PROJECT_DIR_VARIABLE = "DUET_PROJECT_DIR"


def _checkout() -> Path | None:
    root = _PACKAGE.parent
    return root if (root / "pyproject.toml").is_file() and (root / "samples").is_dir() else None


#: The repository checkout this package runs from (the folder holding ``pyproject.toml``, ``tools/`` and
#: ``samples/``), or None where duet is installed (``pip install .``): the demo and the tools live only in a checkout.
CHECKOUT = _checkout()
#: What the library reads that comes with it, in a checkout at its top and in an installed package as package data
#: (pyproject.toml: duet/samples, duet/configs): the bundled checkpoints, the LibriSpeech subset, the Alpaca sample
#: and the open requests; the Hydra configs.
SAMPLES_DIR = (CHECKOUT or _PACKAGE) / "samples"
CONFIG_DIR = (CHECKOUT or _PACKAGE) / "configs"
#: The project folder: where runs write (experiments/) and the data the tools make lives (manifests/, tokenizers/,
#: data/), relative paths in configs included. The checkout; installed, $DUET_PROJECT_DIR when set, else the folder
#: the process started in. Never the installed package.
PROJECT_DIR = CHECKOUT or Path(os.environ.get(PROJECT_DIR_VARIABLE) or Path.cwd()).expanduser().resolve()
#: Where every run writes (speech recognition and language model alike): experiments/<run name>/.
EXPERIMENTS = PROJECT_DIR / "experiments"
#: The older name of PROJECT_DIR, still read by the tools, the demo, the command-line glue and the server.
REPO_ROOT = PROJECT_DIR


def usable_cores() -> int:
    """The CPUs this process may run on (its affinity: what a container or ``taskset`` leaves it)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def python_command(*words: str) -> str:
    """``words`` (a script and its arguments) after the interpreter as the user would type it in the shell that started
    this process, so that a hint or "next:" line works as printed: ``python`` (or ``python3``) where that name on
    PATH runs this very interpreter (an activated venv), else this interpreter's path, relative when it lies under the
    current folder (``.venv/bin/python tools/demo.py`` typed in the repository), e.g.
    ``python_command("tools/demo.py", "--from", "asr")``."""
    executable = sys.executable
    interpreter = executable or "python"
    if executable:
        for name in ("python", "python3"):
            found = shutil.which(name)
            if found and _same_interpreter(found, executable):
                interpreter = name
                break
        else:
            relative = os.path.relpath(executable)
            if relative != os.pardir and not relative.startswith(os.pardir + os.sep):
                interpreter = relative if os.sep in relative else os.path.join(os.curdir, relative)
    return " ".join([shlex.quote(interpreter), *words])


def _same_interpreter(found: str, executable: str) -> bool:
    """Both paths run the same Python in the same environment: the same file, from the same folder (a venv's
    ``bin/python`` links to the system's interpreter but is another environment)."""
    try:
        return (os.path.dirname(os.path.abspath(found)) == os.path.dirname(os.path.abspath(executable))
                and os.path.samefile(found, executable))
    except OSError:
        return False
