"""slm: instruction fine-tuning of GPT-2 on Alpaca-format data, with generation, metrics and ablations.

Library modules: ``data`` (template, collator), ``modeling`` (pretrained or scratch GPT-2),
``metrics`` (losses, BLEU, ROUGE, BERTScore), ``generate`` (decoding; ``respond`` for the pipeline),
``evaluation`` (scores + reports), ``ablation`` (layer / head / FFN pruning), ``config`` (YAML loading).
Entry scripts: ``finetune.py``, ``generate.py``, ``evaluate_slm.py``, ``ablate.py``.
``errors``, ``files`` and ``torch_build`` (the error base, atomic writes, the torch build for this machine's
GPUs) serve both packages and tools/setup.sh: ``slm`` never imports ``duet``.
"""

from pathlib import Path

#: Repository root (the folder holding ``pyproject.toml``); configs/ and samples/ are resolved from it.
REPO_ROOT = Path(__file__).resolve().parent.parent
