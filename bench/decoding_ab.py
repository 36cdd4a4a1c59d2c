#!/usr/bin/env python
r"""Greedy vs beam search vs beam search + n-gram LM: WER and RTFx of a CTC model, LM weights tuned on dev.

Usage:
  python bench/decoding_ab.py --model samples/checkpoints/fastconformer_tiny_base.nemo
  python bench/decoding_ab.py --model exp.nemo --lm experiments/lm/train-clean_token6.arpa \
      --alphas 0.3,0.5,0.7,1.0 --betas 0,0.5,1,2 --beam-size 8 --out experiments/bench/decoding_ab.md

Steps (all on CPU unless a GPU is visible):
  1. LM: --lm, or a token 6-gram built by KenLM's lmplz from --train transcripts (never dev/test) with the
     model's own tokenizer (experiments/bench/lm/).
  2. Grid search on --dev: the encoder runs once, then every (alpha, beta) re-decodes the cached
     log-probabilities with NeMo's beam_batch + LM; the lowest dev WER wins (ties: smaller alpha).
  3. Report on --test: greedy, beam (no LM) and beam + LM at the chosen weights, each through the full
     transcription path (audio -> features -> encoder -> decoding), RTFx = audio seconds / wall seconds
     (best of --repeats runs). Writes a markdown table (--out) and a JSON beside it.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import sys
import time
from pathlib import Path

import torch

from duet.asr import decoding, evaluation, inference, scoring
from duet.asr.batching import OfflineBatching
from duet.data.manifest import read_manifest
from duet.asr.ngram import read_training_text, train_ngram_lm
from duet.foundation import EXPERIMENTS, REPO_ROOT
from duet.foundation.errors import cli
from duet.foundation.files import write_text_atomic


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help=".nemo CTC model")
    p.add_argument("--lm", default=None, help="token ARPA (default: build one from --train)")
    p.add_argument("--train", default=str(REPO_ROOT / "manifests/train-clean.json"), help="LM training text")
    p.add_argument("--dev", default=str(REPO_ROOT / "manifests/dev-clean.json"), help="grid-search manifest")
    p.add_argument("--test", default=str(REPO_ROOT / "manifests/test-clean.json"), help="report manifest")
    p.add_argument("--order", type=int, default=6, help="n-gram order of the built LM")
    p.add_argument("--beam-size", type=int, default=4, help="4 keeps beam+LM above half of greedy's RTFx on CPU")
    p.add_argument("--alphas", default="0.1,0.2,0.3,0.5,0.8")
    p.add_argument("--betas", default="0,1,2,3,4")
    p.add_argument("--batch-size", type=int, default=OfflineBatching.batch_size)
    p.add_argument("--repeats", type=int, default=2, help="timing runs per strategy on test (best is kept)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (1 gives steadier timings on a busy machine)")
    p.add_argument("--out", default=str(EXPERIMENTS / "bench" / "decoding_ab.md"))
    return p


def floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x.strip()]


def build_lm(model, train: str, order: int, out_dir: Path) -> Path:
    arpa = out_dir / f"{Path(train).stem}_token{order}.arpa"
    info = train_ngram_lm(read_training_text(train), arpa, order=order, unit="token", tokenizer=model.tokenizer,
                          text_source=train, binary=False)
    print(f"LM: {arpa} ({info.sentences} sentences, n-grams {info.ngram_counts}, {arpa.stat().st_size / 1024:.0f} KB)")
    return arpa


def grid_search(model, dev: str, lm: Path, alphas, betas, beam_size: int, batch_size: int) -> list[dict]:
    entries = read_manifest(dev)
    paths = [e["audio_filepath"] for e in entries]
    cached = inference.compute_log_probs(model, paths, batch_size=batch_size)
    ids, refs, durs = [Path(p).stem for p in paths], [e["text"] for e in entries], [e["duration"] for e in entries]
    rows = []
    grid = list(itertools.product(alphas, betas))
    for n, (alpha, beta) in enumerate(grid, 1):
        decoder = decoding.build_decoder(model, decoding.decoding_settings(
            "beam_lm", beam_size=beam_size, ngram_lm=str(lm), alpha=alpha, beta=beta))
        wer = scoring.score(ids, refs, inference.decode_log_probs(decoder, cached), durs).summary["wer"]
        rows.append({"alpha": alpha, "beta": beta, "dev_wer": wer})
        print(f"grid {n}/{len(grid)}: alpha={alpha:g} beta={beta:g} dev WER {100 * wer:.2f}%", flush=True)
    greedy = inference.decode_log_probs(decoding.greedy_decoder(model), cached)
    rows.append({"alpha": None, "beta": None, "dev_wer": scoring.score(ids, refs, greedy, durs).summary["wer"]})
    return rows


def timed_eval(model, manifest: str, settings: decoding.DecodingSettings, batch_size: int, repeats: int) -> dict:
    decoder = decoding.build_decoder(model, settings)
    best = None
    for _ in range(repeats):
        s = evaluation.evaluate_manifest(model, manifest, batch_size=batch_size, progress=False,
                                         decoder=decoder).summary
        if best is None or s["wall_seconds"] < best["wall_seconds"]:
            best = s
    return {"decoding": settings.describe(), **{k: best[k] for k in ("wer", "cer", "rtfx", "wall_seconds", "audio_seconds", "utterances")}}


def markdown(rows: list[dict], greedy: dict, cmd: str, chosen: dict, grid: list[dict]) -> str:
    lines = [f"Command: `{cmd}`", "",
             f"Chosen on dev: alpha={chosen['alpha']:g}, beta={chosen['beta']:g} (dev WER {100 * chosen['dev_wer']:.2f}%, "
             f"greedy dev WER {100 * grid[-1]['dev_wer']:.2f}%)", "",
             "| decoding | test WER | rel. to greedy | CER | RTFx | RTFx / greedy |", "|---|---|---|---|---|---|"]
    for r in rows:
        rel = (r["wer"] - greedy["wer"]) / greedy["wer"] if greedy["wer"] else 0.0
        lines.append(f"| {r['decoding']} | {100 * r['wer']:.2f}% | {100 * rel:+.1f}% | {100 * r['cer']:.2f}% | "
                     f"{r['rtfx']:.1f} | {r['rtfx'] / greedy['rtfx']:.2f} |")
    return "\n".join(lines) + "\n"


@cli
def main(argv: list[str] | None = None) -> int:
    args = get_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    out = Path(args.out)
    if args.threads:
        torch.set_num_threads(args.threads)
    model = inference.load_asr_model(args.model)
    lm = Path(args.lm) if args.lm else build_lm(model, args.train, args.order, out.parent / "lm")
    start = time.perf_counter()
    grid = grid_search(model, args.dev, lm, floats(args.alphas), floats(args.betas), args.beam_size, args.batch_size)
    chosen = min(grid[:-1], key=lambda r: (r["dev_wer"], r["alpha"], r["beta"]))
    print(f"grid search: {len(grid) - 1} settings in {time.perf_counter() - start:.0f} s; chosen alpha={chosen['alpha']:g} "
          f"beta={chosen['beta']:g}")
    settings = [decoding.decoding_settings("greedy"), decoding.decoding_settings("beam", beam_size=args.beam_size),
                decoding.decoding_settings("beam_lm", beam_size=args.beam_size, ngram_lm=str(lm),
                                           alpha=chosen["alpha"], beta=chosen["beta"])]
    rows = [timed_eval(model, args.test, s, args.batch_size, args.repeats) for s in settings]
    cmd = "python bench/decoding_ab.py " + " ".join(sys.argv[1:] if argv is None else argv)
    report = markdown(rows, rows[0], cmd, chosen, grid)
    write_text_atomic(out, report)
    write_text_atomic(out.with_suffix(".json"), json.dumps({"model": args.model, "lm": str(lm), "grid": grid,
                                                           "chosen": chosen, "test": rows}, indent=2) + "\n")
    print(report)
    greedy, fused = rows[0], rows[2]
    print(f"decoding_ab: beam+LM WER {100 * fused['wer']:.2f}% vs greedy {100 * greedy['wer']:.2f}% "
          f"({100 * (fused['wer'] - greedy['wer']) / max(greedy['wer'], 1e-9):+.1f}%), RTFx {fused['rtfx']:.1f} vs "
          f"{greedy['rtfx']:.1f}; report {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
