"""duet: fine-tune NeMo CTC speech recognition and a GPT-2 instruction model, and chain them.

Library modules used by the entry scripts in ``tools/``, ``nemo_recipes/`` and ``bench/``.
The language-model side lives in the separate ``slm`` package; both stand on ``duet.foundation`` (errors' base and
``cli``, file helpers, the project's paths: ``SAMPLES_DIR`` is the bundled samples' folder, in a checkout or
installed).
"""

from duet.foundation import SAMPLES_DIR
