"""Synthetic data: sentences, TTS speakers and the LibriSpeech-layout corpora built from them.

Only the data-building tools (``tools/make_sample_corpus.py``, ``tools/make_lm_text.py``,
``bench/asr_generalisation.py``) import this subpackage; no training or inference module does.
"""
