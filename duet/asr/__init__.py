"""Speech recognition side of duet: NeMo CTC fine-tuning recipe steps and evaluation/transcription."""
