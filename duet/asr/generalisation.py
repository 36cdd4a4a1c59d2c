"""Score one ASR model on sets at increasing distance from its training data, in one table.

The sets, nearest first:

* ``sample test-clean`` -- the bundled sample's test split: synthetic voices held out of the sample's
  training split, sentences from the same generator (telephone band);
* ``unseen voices`` -- synthetic speech from TTS voices that no training pool contains, speaking WordNet
  sentences that no training corpus holds (``tools/make_sample_corpus.py --unseen-voices``, wideband);
* every held-out set of recorded human speech in ``../shared/real_speech`` (:mod:`duet.data.real_speech`).

Each set's manifest is built from its LibriSpeech-layout folder by :mod:`duet.data.manifest`; every set is
scored by :func:`duet.asr.evaluation.evaluate_manifest`, so the figures match ``evaluate_ctc.py``'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from duet.asr import evaluation, scoring
from duet.asr.batching import EVALUATION_BATCHING
from duet.errors import AsrInputError
from duet.data.manifest import ManifestOptions, build_split_manifest, spread_subset, write_manifest
from duet.data.real_speech import HELD_OUT_SETS, set_dir

SAMPLE_TEST_SET = "sample test-clean"  # the bundled sample's held-out voices, as the reports name the set

@dataclass(frozen=True)
class EvalSet:
    """One evaluation set: its table name, LibriSpeech-layout folder and how far it is from training."""

    name: str
    split_dir: Path
    distance: str


def sample_and_unseen_sets(sample_test: Path, unseen_split: Path) -> list[EvalSet]:
    return [
        EvalSet(SAMPLE_TEST_SET, sample_test, "synthetic, own generator, speakers held out (telephone)"),
        EvalSet("unseen voices", unseen_split, "synthetic, voices and sentences in no training pool (wideband)"),
    ]


def real_sets(root: Path, names: tuple[str, ...] = HELD_OUT_SETS) -> list[EvalSet]:
    """The held-out real-speech sets under ``root``; a missing folder or set is a RealSpeechMissing error."""
    return [EvalSet(name, set_dir(root, name), "real human speech, held out") for name in names]


def build_manifest(eval_set: EvalSet, out_dir: Path, jobs: int = 1, max_utterances: int | None = None) -> Path:
    """Write ``out_dir/<set name>.json`` for ``eval_set`` (at most ``max_utterances``, spread evenly over the set
    so that every speaker stays in); an empty or unreadable set is an AsrInputError."""
    manifest = build_split_manifest(eval_set.split_dir, ManifestOptions(max_duration=60.0), jobs=jobs)
    if not manifest.entries:
        reasons = "; ".join(str(p) for p in manifest.problems[:3]) or "no audio with transcripts"
        raise AsrInputError(f"{eval_set.name}: no usable utterance in {eval_set.split_dir} ({reasons})")
    path = out_dir / f"{eval_set.name.replace(' ', '_').replace('/', '_')}.json"
    write_manifest(path, spread_subset(manifest.entries, max_utterances) if max_utterances else manifest.entries)
    return path


def score_sets(model, sets: list[EvalSet], out_dir: Path, batch_size: int = EVALUATION_BATCHING.batch_size,
               workers: int | None = None, on_result=None, transcribe=None,
               max_utterances: int | None = None) -> list[dict]:
    """Score ``model`` on every set (at most ``max_utterances`` of each, spread over it); per-set utterance JSONL
    and summary go to ``out_dir``. Returns one row per set (name, distance, utterances, audio_minutes, wer, cer,
    and the errors); ``on_result(row)`` is called as each set finishes. ``transcribe`` (audio paths ->
    transcripts) replaces the model, e.g. with another toolkit's recogniser scored on the same manifests."""
    rows = []
    for eval_set in sets:
        manifest = build_manifest(eval_set, out_dir / "manifests", max_utterances=max_utterances)
        scored = evaluation.evaluate_manifest(model, manifest, batch_size=batch_size, progress=False, workers=workers,
                                            transcribe=transcribe)
        prefix = manifest.stem
        scoring.write_results(scored, out_dir, prefix)
        s = scored.summary
        row = {
            "set": eval_set.name, "distance": eval_set.distance, "utterances": s["utterances"],
            "audio_minutes": round(s["audio_seconds"] / 60, 1), "wer": s["wer"], "cer": s["cer"],
            "reference_words": s["reference_words"], "substitutions": s["substitutions"],
            "deletions": s["deletions"], "insertions": s["insertions"], "rtfx": s["rtfx"],
        }
        rows.append(row)
        if on_result:
            on_result(row)
    return rows


def format_table(rows: list[dict]) -> str:
    """The rows as a fixed-width table: set, utterances, audio, WER, CER."""
    lines = [f"{'set':<22} {'utts':>6} {'audio':>9} {'WER':>8} {'CER':>8}"]
    for r in rows:
        lines.append(f"{r['set']:<22} {r['utterances']:>6} {r['audio_minutes']:>7.1f} m "
                     f"{100 * r['wer']:>7.2f}% {100 * r['cer']:>7.2f}%")
    return "\n".join(lines)
