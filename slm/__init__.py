"""slm: instruction fine-tuning of GPT-2 on Alpaca-format data, with generation, metrics and ablations.

Library modules: ``data`` (template, collator), ``modeling`` (pretrained or scratch GPT-2),
``metrics`` (losses, BLEU, ROUGE, BERTScore), ``generation`` (loading a model folder, decoding settings and
decoding; ``respond`` for the pipeline), ``evaluation`` (scores + reports of a model folder), ``ablation``
(layer / head / FFN pruning and the ablation study), ``config`` (YAML loading),
``errors`` (``SlmError``), ``torch_build`` (the torch build for this machine's GPUs; ``duet``'s recipes and
tools/setup.sh use it too). Commands, each reading its options and calling the library:
``finetune.py``, ``generate.py``, ``evaluate_slm.py``, ``ablate.py``, ``choose_torch_build.py`` (run by the setup
as ``python -m slm.choose_torch_build``).
``slm`` stands on ``duet.foundation`` only and imports nothing else of ``duet``.
"""
