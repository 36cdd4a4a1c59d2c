"""Transcribe every utterance of a NeMo manifest and score it: ties ``duet.asr.inference`` (or any other
transcription path, e.g. streaming) to ``duet.asr.scoring``."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Collection

from duet.asr.batching import OfflineBatching
from duet.asr.inference import transcribe_files, transcribe_files_with_words
from duet.asr.scoring import Scored, score
from duet.errors import AsrInputError
from duet.data.manifest import read_manifest


def evaluate_manifest(model, manifest: str | Path, batch_size: int = OfflineBatching.batch_size, progress: bool = True,
                      transcribe: Callable[[list[str]], list[str]] | None = None,
                      workers: int | None = None, words: bool = False, skip: Collection[str] = (),
                      decoder=None) -> Scored:
    """Transcribe every entry of a NeMo manifest and score it; summary includes RTFx (audio s / wall s).

    ``transcribe`` (audio paths -> transcripts) replaces the batched :func:`duet.asr.inference.transcribe_files`, e.g. with
    ``duet.asr.streaming``'s chunk-by-chunk path; ``workers``: see :func:`duet.asr.inference.transcribe_audio`.
    ``words`` adds each utterance's word times and confidences (``duet.asr.words``; force-aligned under beam search) to
    its record as ``words`` (not with ``transcribe``). ``skip``: audio paths left out (files that cannot be read,
    which the caller has reported); the summary counts them as ``skipped``. ``decoder``: the CTC decoding
    (``duet.asr.decoding.build_decoder``; greedy when None).
    """
    if words and transcribe is not None:
        raise AsrInputError("word timestamps come from the batched transcription, not from a replacement transcribe")
    entries = read_manifest(manifest)
    if not entries:
        raise AsrInputError(f"manifest is empty: {manifest}")
    skip = set(map(str, skip))
    kept = [e for e in entries if e["audio_filepath"] not in skip]
    if not kept:
        raise AsrInputError(f"no readable audio in {manifest}")
    skipped, entries = len(entries) - len(kept), kept
    paths = [e["audio_filepath"] for e in entries]
    start = time.perf_counter()
    timed = None
    if transcribe is not None:
        hyps = transcribe(paths)
    elif words:
        timed = transcribe_files_with_words(model, paths, batch_size=batch_size, progress=progress, workers=workers,
                                            decoder=decoder)
        hyps = [t.text for t in timed]
    else:
        hyps = transcribe_files(model, paths, batch_size=batch_size, progress=progress, workers=workers,
                                decoder=decoder)
    wall = time.perf_counter() - start
    ids = [e.get("id") or Path(p).stem for e, p in zip(entries, paths)]
    durations = [float(e["duration"]) for e in entries]
    scored = score(ids, [e["text"] for e in entries], hyps, durations)
    for record, transcript in zip(scored.records, timed or []):
        record["words"] = transcript.words_json()
    audio_seconds = sum(durations)
    scored.summary.update(
        manifest=str(manifest),
        audio_seconds=round(audio_seconds, 2),
        wall_seconds=round(wall, 3),
        rtfx=round(audio_seconds / wall, 2) if wall > 0 else None,
        batch_size=batch_size,
        skipped=skipped,
    )
    return scored
