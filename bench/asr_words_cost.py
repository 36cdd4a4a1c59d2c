#!/usr/bin/env python
r"""What word timestamps and per-word confidence cost evaluation: evaluate_manifest with and without them.

Usage:
  python bench/asr_words_cost.py                          # bundled base checkpoint, test-clean + dev-clean
  python bench/asr_words_cost.py --model experiments/demo_asr/demo_asr.nemo --rounds 5 --json experiments/bench/words.json
  python bench/asr_words_cost.py --model experiments/demo_asr/demo_asr.nemo --decoding beam_lm \
      --beam-size 16 --lm experiments/demo_lm/lm_text_token6.arpa --alpha 1.1 --beta 4 --whisper-weight 0.5
      # (the demo's decoding.json)

Both settings run ``duet.asr.evaluation.evaluate_manifest`` (duration-sorted batches of --batch-size, in this
process: one decoding process, so its CPU time is all in ``time.process_time``) on the bundled sample's --splits,
decoding as --decoding says (greedy by default); with words, NeMo's greedy decoding also computes timestamps and
max-probability confidence, and beam search's transcripts are force-aligned to the same log-probabilities and read
by that greedy decoding (``duet.asr.words``). Rounds are interleaved after one warm-up of each; the figures are
medians of wall and CPU seconds and the ratio words / plain. The transcripts of both are compared (they must be
the same).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from duet import SAMPLES_DIR
from duet.asr import evaluation, inference
from duet.asr.batching import OfflineBatching
from duet.asr.decoding import build_decoder
from duet.cli.cli_args import add_decoding_arguments, decoding_settings_from_args
from duet.errors import DuetError
from duet.data.manifest import build_split_manifest, write_manifest
from duet.foundation.errors import cli
from duet.foundation.files import write_text_atomic

DEFAULT_MODEL = SAMPLES_DIR / "checkpoints" / "fastconformer_tiny_base.nemo"


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", type=Path, default=DEFAULT_MODEL, help=f"a .nemo checkpoint (default: {DEFAULT_MODEL})")
    p.add_argument("--splits", nargs="+", default=["test-clean", "dev-clean"], help="sample splits to transcribe")
    p.add_argument("--batch-size", type=int, default=OfflineBatching.batch_size)
    p.add_argument("--rounds", type=int, default=3, help="timed rounds of each setting (default: 3)")
    p.add_argument("--json", type=Path, default=None, help="also write the figures here")
    add_decoding_arguments(p)
    return p


@cli
def main(argv=None) -> int:
    args = get_parser().parse_args(argv)
    decoding = decoding_settings_from_args(args)
    model = inference.load_asr_model(args.model, device="cpu")
    decoder = build_decoder(model, decoding)
    with tempfile.TemporaryDirectory() as tmp:
        manifest = Path(tmp) / "bench.json"
        entries = [e for split in args.splits
                   for e in build_split_manifest(SAMPLES_DIR / "LibriSpeech" / split).entries]
        write_manifest(manifest, entries)

        def run(words: bool):
            return evaluation.evaluate_manifest(model, manifest, batch_size=args.batch_size, progress=False,
                                              workers=1, words=words, decoder=decoder)
        plain, with_words = run(False), run(True)  # warm-up
        if [r["hyp"] for r in plain.records] != [r["hyp"] for r in with_words.records]:
            raise DuetError("transcripts differ with word timestamps on")
        times = {"plain": [], "words": []}
        for _ in range(args.rounds):
            for name, words in (("plain", False), ("words", True)):
                wall, cpu = time.perf_counter(), time.process_time()
                run(words)
                times[name].append((time.perf_counter() - wall, time.process_time() - cpu))
    audio_s = sum(float(e["duration"]) for e in entries)
    report = {"model": str(args.model), "utterances": len(entries), "audio_seconds": round(audio_s, 1),
              "batch_size": args.batch_size, "rounds": args.rounds, "decoding": decoding.describe()}
    for name, runs in times.items():
        report[f"{name}_wall_s"] = round(statistics.median(w for w, _ in runs), 3)
        report[f"{name}_cpu_s"] = round(statistics.median(c for _, c in runs), 3)
    report["words_over_plain_wall"] = round(report["words_wall_s"] / report["plain_wall_s"], 3)
    report["words_over_plain_cpu"] = round(report["words_cpu_s"] / report["plain_cpu_s"], 3)
    print(json.dumps(report, indent=2))
    if args.json:
        write_text_atomic(args.json, json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
