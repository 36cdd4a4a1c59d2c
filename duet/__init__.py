"""duet: fine-tune NeMo CTC speech recognition and a GPT-2 instruction model, and chain them.

Library modules used by the entry scripts in ``tools/``, ``nemo_recipes/`` and ``bench/``.
The language-model side lives in the separate ``slm`` package.
"""

from slm import REPO_ROOT  # the repository root (the folder holding ``pyproject.toml``)

SAMPLES_DIR = REPO_ROOT / "samples"
