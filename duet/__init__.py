"""duet: fine-tune NeMo CTC speech recognition and a GPT-2 instruction model, and chain them.

Library modules used by the entry scripts in ``tools/``, ``nemo_recipes/`` and ``bench/``.
The language-model side lives in the separate ``slm`` package.
"""

from pathlib import Path

#: Repository root (the folder holding ``pyproject.toml``); entry scripts resolve defaults from it.
REPO_ROOT = Path(__file__).resolve().parent.parent
SAMPLES_DIR = REPO_ROOT / "samples"
