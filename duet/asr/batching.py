"""How offline transcription batches audio: the typed settings of ``duet.asr.inference`` and the voice
pipeline's long-file cutting. Kept apart from ``inference`` so that reading them costs no torch import
(entry scripts build them while parsing options; importing torch takes seconds)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from duet.errors import AsrInputError


def check_workers(workers: int | None, name: str = "workers") -> None:
    """``workers`` (``None``: the default) must be at least 1; ``name`` is what the message calls it."""
    if workers is not None and workers < 1:
        raise AsrInputError(f"{name} must be 1 or more, got {workers}")


@dataclass(frozen=True)
class OfflineBatching:
    """Batching of offline transcription. Streaming runs one file at a time, whole, and takes none of it."""

    batch_size: int = 16  # utterances (or pieces of a long file) per forward pass; duet.asr.inference's default
    workers: int | None = None  # CPU decoding processes (ONNX: threads); None: duet.asr.inference's default
    max_chunk_seconds: float | None = None  # longest piece of a long recording the model sees (voice pipeline)

    def validate(self, names: Mapping[str, str] | None = None) -> None:
        """Raise ``AsrInputError`` for a value out of range; ``names`` maps a field to what the message calls
        it (an option's flag), the field's own name otherwise."""
        names = names or {}
        if self.batch_size < 1:
            raise AsrInputError(f"{names.get('batch_size', 'batch_size')} must be 1 or more, got {self.batch_size}")
        check_workers(self.workers, names.get("workers", "workers"))
        if self.max_chunk_seconds is not None and self.max_chunk_seconds <= 0:
            raise AsrInputError(f"{names.get('max_chunk_seconds', 'max_chunk_seconds')} must be > 0, "
                                f"got {self.max_chunk_seconds:g}")


# Scoring whole manifests (nemo_recipes/evaluate_ctc.py, bench/asr_generalisation.py, bench/asr_speed.py): larger
# batches, no cutting.
EVALUATION_BATCHING = OfflineBatching(batch_size=32)
# The voice pipeline (duet.pipeline.PipelineSettings): one request's recording, cut at pauses into pieces of at
# most 20 s so that memory stays bounded whatever its length; two pieces a batch keep a long upload's peak within the
# server's memory target under joint decoding (bench/upload_memory.py: 8 a batch cost twice as much, no faster).
PIPELINE_BATCHING = OfflineBatching(batch_size=2, max_chunk_seconds=20.0)
