"""Synthetic data: sentences, TTS speakers and the LibriSpeech-layout corpora built from them.

Only the data-building tools (``tools/make_sample_corpus.py``, ``tools/make_lm_text.py``,
``bench/asr_generalisation.py``), the demo's stages (``duet.demo.stages``) and benchmarks that make test audio import
this subpackage; no training or inference module reaches it, directly or through another module
(tests/test_layout.py).
"""
