"""Where speech and text come from: LibriSpeech and the other corpora's readers, NeMo JSONL manifests, the held-out
real speech, WordNet text, the pronunciation lexicon and the SentencePiece tokenizer trained on transcripts."""
