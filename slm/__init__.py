"""slm: instruction fine-tuning of GPT-2 on Alpaca-format data, with generation, metrics and ablations.

Library modules: ``data`` (template, collator), ``modeling`` (pretrained or scratch GPT-2),
``metrics`` (losses, BLEU, ROUGE, BERTScore), ``generate`` (decoding; ``respond`` for the pipeline),
``evaluation`` (scores + reports), ``ablation`` (layer / head / FFN pruning), ``config`` (YAML loading),
``errors`` (``SlmError``), ``torch_build`` (the torch build for this machine's GPUs; ``duet``'s recipes and
tools/setup.sh use it too). Entry scripts: ``finetune.py``, ``generate.py``, ``evaluate_slm.py``, ``ablate.py``.
``slm`` stands on ``duet.foundation`` only and imports nothing else of ``duet``.
"""
