"""Score transcripts against references: WER/CER with jiwer on normalised text (``duet.text.normalize_spoken``:
numbers spelt as read, so "1999" and "nineteen ninety nine" agree), one row per utterance,
and the reports (per-utterance JSONL, summary JSON, a worst/best table)."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import jiwer

from duet.errors import AsrInputError
from duet.text import normalize_spoken
from duet.foundation.files import write_jsonl_atomic, write_text_atomic

log = logging.getLogger(__name__)


@dataclass
class Scored:
    records: list[dict]  # one per utterance: id, ref, hyp, wer, duration
    summary: dict  # corpus-level WER, CER, error counts, RTFx, ...


def score(ids: Sequence[str], refs: Sequence[str], hyps: Sequence[str], durations: Sequence[float]) -> Scored:
    """Per-utterance and corpus WER/CER with jiwer on normalised text (empty references are skipped)."""
    refs_n = [normalize_spoken(r) for r in refs]
    hyps_n = [normalize_spoken(h) for h in hyps]
    records, keep = [], []
    for i, (uid, ref, hyp) in enumerate(zip(ids, refs_n, hyps_n)):
        utt_wer = jiwer.wer(ref, hyp) if ref else None
        records.append({"id": uid, "ref": ref, "hyp": hyp, "wer": utt_wer, "duration": durations[i]})
        if ref:
            keep.append(i)
    if len(keep) < len(ids):
        log.warning("%d utterance(s) with an empty reference left out of WER", len(ids) - len(keep))
    if not keep:
        raise AsrInputError("no utterance has a non-empty reference text: nothing to score")
    words = jiwer.process_words([refs_n[i] for i in keep], [hyps_n[i] for i in keep])
    chars = jiwer.process_characters([refs_n[i] for i in keep], [hyps_n[i] for i in keep])
    summary = {
        "utterances": len(ids),
        "scored_utterances": len(keep),
        "wer": words.wer,
        "cer": chars.cer,
        "substitutions": words.substitutions,
        "deletions": words.deletions,
        "insertions": words.insertions,
        "reference_words": words.substitutions + words.deletions + words.hits,
    }
    return Scored(records, summary)


def write_results(scored: Scored, out_dir: str | Path, prefix: str) -> tuple[Path, Path]:
    """Write ``<prefix>_utterances.jsonl`` and ``<prefix>_summary.json`` into ``out_dir`` (atomically)."""
    out_dir = Path(out_dir)
    utt_path = out_dir / f"{prefix}_utterances.jsonl"
    summary_path = out_dir / f"{prefix}_summary.json"
    write_jsonl_atomic(utt_path, scored.records)
    write_text_atomic(summary_path, json.dumps(scored.summary, indent=2) + "\n")
    return utt_path, summary_path


def format_examples(records: list[dict], n: int = 5) -> str:
    """A plain-text table of the ``n`` worst and ``n`` best scored utterances (ties: longer first)."""
    scored = [r for r in records if r["wer"] is not None]
    ranked = sorted(scored, key=lambda r: (r["wer"], -len(r["ref"])))
    lines = []
    for title, rows in (("worst", ranked[::-1][:n]), ("best", ranked[:n])):
        lines.append(f"--- {title} {len(rows)} utterances ---")
        for r in rows:
            lines.append(f"{r['id']}  WER {100 * r['wer']:.1f}%")
            lines.append(f"  REF: {r['ref']}")
            lines.append(f"  HYP: {r['hyp']}")
    return "\n".join(lines)
