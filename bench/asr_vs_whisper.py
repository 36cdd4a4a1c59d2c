#!/usr/bin/env python
"""Our Whisper-encoder CTC base (ONNX Runtime, int8) against faster-whisper tiny.en (int8): same files, same threads.

Usage:
  python bench/asr_vs_whisper.py --model samples/checkpoints/whisper_tiny_ctc.nemo            # the sample's test-clean
  python bench/asr_vs_whisper.py --model M.nemo --manifest data/speechocean762/test.json --rounds 3
  python bench/asr_vs_whisper.py --model M.nemo --threads 1
  python bench/asr_vs_whisper.py --model M.nemo --whisper-fallback      # faster-whisper as it decodes by default

Both read the same audio files (reading included in the time) with --threads CPU threads:
  ours      the .nemo exported by tools/export_onnx.py (written beside it as <stem>_onnx/ when missing), int8 graph,
            duet.asr.inference.transcribe_files: duration-sorted batches of --batch-size shared among --threads
            threads of one-thread sessions, NeMo's greedy CTC decoding
  whisper   faster-whisper 1.2 (CTranslate2) with Whisper tiny.en's own decoder, int8, greedy (beam 1, temperature
            0; --whisper-fallback: its default fallback to higher temperatures), no timestamps, one file at a time
            (its transcribe() takes one recording), cpu_threads=--threads; its transcripts get whole numbers spelt
            out, like every transcript scored here
Each round times both, alternating which goes first; the figures are medians over --rounds after a warm-up pass.
Throughput = audio seconds / wall seconds; the ratio is ours / whisper. Latency: one ~5 s clip alone, to transcript,
the best of --rounds. Also prints both WERs on the files (normalised text). Writes <out>/asr_vs_whisper.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

from duet import SAMPLES_DIR
from duet.asr.batching import PIPELINE_BATCHING
from duet.asr.inference import load_audio, transcribe_files
from duet.asr.onnx_engine import default_export_dir, load_onnx_model
from duet.asr.onnx_export import OnnxExportSettings, export_onnx
from duet.asr.pseudo_labelling import WhisperTeacher, manifest_text
from duet.asr.scoring import score
from duet.errors import DuetError
from duet.manifest import build_split_manifest, read_manifest
from duet.foundation import EXPERIMENTS
from duet.foundation.errors import cli
from duet.foundation.files import write_text_atomic


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, required=True, help="our .nemo (a Whisper-encoder CTC model)")
    parser.add_argument("--manifest", type=Path, help="files to transcribe (default: the sample's test-clean)")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads for both (default 2)")
    parser.add_argument("--batch-size", type=int, default=PIPELINE_BATCHING.batch_size,
                        help="our batches (default: the voice pipeline's, %(default)s)")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds after the warm-up (default 3)")
    parser.add_argument("--whisper-fallback", action="store_true",
                        help="faster-whisper's default temperature fallback (a hard utterance is decoded again at rising "
                             "temperatures, up to six times); default: one greedy decode at temperature 0")
    parser.add_argument("--out", type=Path, default=EXPERIMENTS / "bench" / "asr_vs_whisper")
    return parser


def entries_of(manifest: Path | None) -> list[dict]:
    if manifest is None:
        return build_split_manifest(SAMPLES_DIR / "LibriSpeech" / "test-clean").entries
    if not manifest.is_file():
        raise DuetError(f"--manifest: not found: {manifest}")
    return read_manifest(manifest)


def five_second_clip(entries: list[dict], folder: Path) -> Path:
    """The file nearest 5 s, or the first files joined to ~5 s when none is close."""
    best = min(entries, key=lambda e: abs(float(e["duration"]) - 5.0))
    if abs(float(best["duration"]) - 5.0) < 1.0:
        return Path(best["audio_filepath"])
    audio = np.concatenate([load_audio(e["audio_filepath"], 16000) for e in entries[:8]])[: 5 * 16000]
    path = folder / "clip_5s.wav"
    sf.write(path, audio, 16000)
    return path


@cli
def main(argv: list[str] | None = None) -> int:
    args = get_parser().parse_args(argv)
    if not args.model.is_file():
        raise DuetError(f"--model: no such file: {args.model}")
    if args.threads < 1 or args.rounds < 1:
        raise DuetError("--threads and --rounds must be >= 1")
    entries = entries_of(args.manifest)
    paths = [e["audio_filepath"] for e in entries]
    audio_seconds = sum(float(e["duration"]) for e in entries)
    torch.set_num_threads(args.threads)
    export = default_export_dir(args.model)
    if not (export / "metadata.json").is_file():
        print(f"asr_vs_whisper: exporting {args.model} to {export} (once)", file=sys.stderr)
        export_onnx(args.model, export, paths[:4], OnnxExportSettings(int8=True))
    ours_model = load_onnx_model(export, int8=True, threads=args.threads)
    whisper = WhisperTeacher(threads=args.threads, temperature_fallback=args.whisper_fallback)

    def ours(files):
        return transcribe_files(ours_model, files, batch_size=args.batch_size, workers=args.threads)

    def theirs(files):
        return [manifest_text(text) for text, _ in whisper.label([load_audio(p, 16000) for p in files])]

    systems = {"ours (ONNX int8)": ours, "whisper tiny.en (faster-whisper int8)": theirs}
    hyps = {name: run(paths) for name, run in systems.items()}  # warm-up pass, also the WER
    seconds = {name: [] for name in systems}
    for r in range(args.rounds):
        order = list(systems) if r % 2 == 0 else list(reversed(systems))
        for name in order:
            start = time.perf_counter()
            systems[name](paths)
            seconds[name].append(time.perf_counter() - start)
    args.out.mkdir(parents=True, exist_ok=True)
    clip = five_second_clip(entries, args.out)
    clip_seconds = sf.info(str(clip)).duration
    latency = {name: min(_timed(run, [str(clip)]) for _ in range(args.rounds)) for name, run in systems.items()}
    ids = [Path(p).stem for p in paths]
    rows = {}
    for name in systems:
        s = score(ids, [e["text"] for e in entries], hyps[name], [float(e["duration"]) for e in entries]).summary
        wall = statistics.median(seconds[name])
        rows[name] = {"wer": s["wer"], "cer": s["cer"], "median_seconds": round(wall, 3),
                      "rounds_seconds": [round(x, 3) for x in seconds[name]],
                      "throughput_rtfx": round(audio_seconds / wall, 1), "latency_seconds": round(latency[name], 3)}
    names = list(systems)
    ratio = rows[names[0]]["throughput_rtfx"] / rows[names[1]]["throughput_rtfx"]
    report = {"model": str(args.model), "files": len(paths), "audio_seconds": round(audio_seconds, 1),
              "manifest": str(args.manifest or "samples/LibriSpeech/test-clean"), "threads": args.threads,
              "rounds": args.rounds, "clip_seconds": round(clip_seconds, 2), "whisper_fallback": args.whisper_fallback,
              "rows": rows,
              "throughput_ratio": round(ratio, 2)}
    write_text_atomic(args.out / "asr_vs_whisper.json", json.dumps(report, indent=2) + "\n")
    print(f"{len(paths)} files, {audio_seconds / 60:.1f} min of audio, {args.threads} threads, median of {args.rounds} rounds")
    print(f"{'system':<40} {'WER':>7} {'CER':>7} {'RTFx':>7} {f'{clip_seconds:.1f} s clip':>11}")
    for name, row in rows.items():
        print(f"{name:<40} {100 * row['wer']:>6.2f}% {100 * row['cer']:>6.2f}% {row['throughput_rtfx']:>7.1f} "
              f"{row['latency_seconds']:>9.3f} s")
    print(f"asr_vs_whisper: ours / whisper throughput {ratio:.2f}x; wrote {args.out / 'asr_vs_whisper.json'}")
    return 0


def _timed(run, files) -> float:
    start = time.perf_counter()
    run(files)
    return time.perf_counter() - start


if __name__ == "__main__":
    sys.exit(main())
