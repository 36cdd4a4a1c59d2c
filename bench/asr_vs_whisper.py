#!/usr/bin/env python
"""The pipeline's transcription against faster-whisper tiny.en with its defaults: same files, same threads, one run.

Usage:
  # the demo's model and its decoding.json (after python tools/demo.py), on the held-out real sets and the sample's
  # test voices
  python bench/asr_vs_whisper.py --model experiments/demo_asr/demo_asr.nemo --real-speech ../shared/real_speech
  python bench/asr_vs_whisper.py --model M.nemo --manifest my_test.json --threads 1
  python bench/asr_vs_whisper.py --model samples/checkpoints/whisper_tiny_ctc.nemo --decoding greedy --engine onnx

Systems, each reading the same audio files (reading included in the time) with --threads CPU threads:
  ours      the model through duet.asr.inference.transcribe_files with the decoding the pipeline uses for it: its
            decoding.json (duet.asr.decoding.file) unless --decoding names a strategy; --engine onnx: its int8 export
            (tools/export_onnx.py, written beside the .nemo when missing)
  whisper   faster-whisper 1.2 (CTranslate2, int8) with Whisper tiny.en's own decoder and transcribe()'s defaults:
            beam 5, temperature fallback, one file at a time (its transcribe() takes one recording); its transcripts
            get whole numbers spelt out, like every transcript scored here
Sets: every --manifest (default: the sample's test-clean voices), and with --real-speech the held-out sets
speechocean762/test, read_sentences and common_voice. Each set is run once by each system, the order alternating from
set to set; WER is on normalised text. Also: clips of non-speech generated here (digital silence, dither, coloured
noise, hum, fan, music-like tones; --noise-clips of each kind) and how many of them each system writes any word
for; throughput (audio seconds / wall seconds) over all the sets and its ratio ours / whisper, and the same per
CPU second (user + system time: what other work on a shared machine does not inflate); a ~5 s clip alone, to
transcript. Writes <out>/asr_vs_whisper.json.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

from duet import SAMPLES_DIR
from duet.asr.batching import PIPELINE_BATCHING
from duet.asr.decoding import build_decoder, decoding_settings, strategies
from duet.asr.generalisation import build_manifest, real_sets
from duet.asr.inference import load_asr_model, load_audio, transcribe_files
from duet.asr.onnx_engine import ENGINES, load_onnx_model
from duet.asr.onnx_export import int8_export_beside
from duet.asr.pseudo_labelling import manifest_text
from duet.asr.whisper_weights import whisper_tiny_en
from duet.asr.scoring import score
from duet.asr.decoding.file import decoding_file_for, read_decoding_file
from duet.errors import DuetError
from duet.data.manifest import build_split_manifest, read_manifest
from duet.foundation import EXPERIMENTS
from duet.foundation.errors import cli
from duet.foundation.files import add_log_arguments, library_output_to, log_target, write_text_atomic
from duet.synth.noise import SYNTH_NOISES

REAL_TEST_SETS = ("speechocean762/test", "read_sentences", "common_voice")
SAMPLE_RATE = 16000
NOISE_SECONDS = 5.0


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, required=True, help="our .nemo CTC model")
    parser.add_argument("--decoding", choices=strategies(), default=None,
                        help="a strategy at its defaults instead of the model's decoding.json")
    parser.add_argument("--engine", choices=ENGINES, default=ENGINES[0], help="torch, or the int8 ONNX export")
    parser.add_argument("--manifest", type=Path, nargs="*", default=None,
                        help="sets to transcribe (default: the sample's test-clean)")
    parser.add_argument("--real-speech", type=Path, default=None,
                        help=f"../shared/real_speech: adds its held-out sets {', '.join(REAL_TEST_SETS)}")
    parser.add_argument("--max-utterances", type=int, default=None,
                        help="at most this many utterances of each real set, spread evenly over it (default: all)")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads for both (default 2)")
    parser.add_argument("--batch-size", type=int, default=PIPELINE_BATCHING.batch_size,
                        help="our batches (default: the voice pipeline's, %(default)s)")
    parser.add_argument("--noise-clips", type=int, default=3, help="non-speech clips of each kind (default 3)")
    parser.add_argument("--out", type=Path, default=EXPERIMENTS / "bench" / "asr_vs_whisper")
    add_log_arguments(parser, "asr_vs_whisper")
    return parser


def entries_of(manifest: Path | None) -> list[dict]:
    if manifest is None:
        return build_split_manifest(SAMPLES_DIR / "LibriSpeech" / "test-clean").entries
    if not manifest.is_file():
        raise DuetError(f"--manifest: not found: {manifest}")
    return read_manifest(manifest)


def non_speech_clips(folder: Path, per_kind: int) -> list[Path]:
    """5 s clips with no speech in them: digital silence, dither, sox's coloured noises, hum and fan
    (duet.synth.noise's kinds) and music-like tones, at several levels; the same files for the same arguments."""
    rng = np.random.default_rng(20261206)
    folder.mkdir(parents=True, exist_ok=True)
    n = int(NOISE_SECONDS * SAMPLE_RATE)
    t = np.arange(n) / SAMPLE_RATE
    clips = []
    for k in range(per_kind):
        level = 10 ** (-(20 + 15 * k) / 20)  # -20, -35, -50 dBFS
        made = {"silence": np.zeros(n), "dither": rng.normal(0, 10 ** (-70 / 20), n)}
        # chords of plucked-like decaying tones, a new note every half second
        notes = 220 * 2 ** (rng.integers(0, 24, size=10) / 12)
        music = np.zeros(n)
        for i, f in enumerate(notes):
            start = i * SAMPLE_RATE // 2
            decay = np.exp(-3 * t[: n - start])
            music[start:] += decay * (np.sin(2 * np.pi * f * t[: n - start]) + 0.5 * np.sin(4 * np.pi * f * t[: n - start]))
        made["music"] = music
        for name, audio in made.items():
            path = folder / f"{name}_{k}.flac"
            peak = np.abs(audio).max()
            sf.write(path, (audio / peak * level if peak and name == "music" else audio).astype(np.float32),
                     SAMPLE_RATE)
            clips.append(path)
        for name, (synth, effects) in SYNTH_NOISES.items():
            path = folder / f"{name}_{k}.flac"
            subprocess.run(["sox", "-n", "-r", str(SAMPLE_RATE), "-c", "1", "-b", "16", str(path), "synth",
                            f"{NOISE_SECONDS}", *synth, *effects, "norm", f"{-(20 + 15 * k)}"],
                           check=True, capture_output=True)
            clips.append(path)
    return clips


def five_second_clip(entries: list[dict], folder: Path) -> Path:
    """The file nearest 5 s, or the first files joined to ~5 s when none is close."""
    best = min(entries, key=lambda e: abs(float(e["duration"]) - 5.0))
    if abs(float(best["duration"]) - 5.0) < 1.0:
        return Path(best["audio_filepath"])
    audio = np.concatenate([load_audio(e["audio_filepath"], SAMPLE_RATE) for e in entries[:8]])[: 5 * SAMPLE_RATE]
    path = folder / "clip_5s.wav"
    sf.write(path, audio, SAMPLE_RATE)
    return path


def our_system(args, err):
    """Our transcriber (paths -> texts) and the decoding it uses, described; ``err``: the console's standard error."""
    if args.decoding is not None:
        settings = decoding_settings(args.decoding)
    elif decoding_file_for(args.model).is_file():
        settings = read_decoding_file(decoding_file_for(args.model)).settings
    else:
        settings = decoding_settings()
    if args.engine == "onnx":
        export = int8_export_beside(args.model, lambda line: print(f"asr_vs_whisper: {line}", file=err))
        model = load_onnx_model(export, int8=True, threads=args.threads)
    else:
        model = load_asr_model(args.model, device="cpu")
    decoder = build_decoder(model, settings)

    def transcribe(files):
        return transcribe_files(model, files, batch_size=args.batch_size, workers=args.threads, decoder=decoder)

    return transcribe, f"{args.engine}, {settings.describe()}"


def whisper_system(threads: int):
    model = whisper_tiny_en(threads)

    def transcribe(files):
        texts = []
        for path in files:
            segments, _ = model.transcribe(load_audio(path, SAMPLE_RATE), language="en")
            texts.append(" ".join(s.text.strip() for s in segments))
        return texts

    return transcribe


@cli
def main(argv: list[str] | None = None) -> int:
    args = get_parser().parse_args(argv)
    if not args.model.is_file():
        raise DuetError(f"--model: no such file: {args.model}")
    if args.threads < 1 or args.noise_clips < 0:
        raise DuetError("--threads must be >= 1 and --noise-clips >= 0")
    args.out.mkdir(parents=True, exist_ok=True)
    sets: dict[str, list[dict]] = {}
    for manifest in args.manifest or [None]:
        sets[manifest.stem if manifest else "sample test-clean"] = entries_of(manifest)
    if args.real_speech is not None:
        for eval_set in real_sets(args.real_speech, REAL_TEST_SETS):
            sets[eval_set.name] = read_manifest(build_manifest(eval_set, args.out / "manifests",
                                                               max_utterances=args.max_utterances))
    noise = [str(p) for p in non_speech_clips(args.out / "non_speech", args.noise_clips)]
    torch.set_num_threads(args.threads)
    with library_output_to(log_target(args)) as (out, err):  # NeMo's and faster-whisper's lines
        compare(args, sets, noise, out, err)
    return 0


def cpu_seconds() -> float:
    """CPU time (user + system) of this process and the workers it has waited for: beside wall time, the cost
    that other work on a shared machine does not inflate."""
    return sum(r.ru_utime + r.ru_stime for r in (resource.getrusage(resource.RUSAGE_SELF),
                                                  resource.getrusage(resource.RUSAGE_CHILDREN)))


def compare(args, sets: dict[str, list[dict]], noise: list[str], out, err) -> None:
    """Both systems on every set, the noise clips and a 5 s clip; the table to ``out``, progress to ``err``."""
    ours, described = our_system(args, err)
    theirs = whisper_system(args.threads)
    systems = {f"ours ({described})": ours, "whisper tiny.en (faster-whisper defaults)": theirs}
    names = list(systems)
    for run in systems.values():  # warm-up: the models' first calls
        run([sets[next(iter(sets))][0]["audio_filepath"]])
    rows, seconds, cpu = [], {name: 0.0 for name in names}, {name: 0.0 for name in names}
    audio_seconds = 0.0
    for k, (set_name, entries) in enumerate(sets.items()):
        paths = [e["audio_filepath"] for e in entries]
        audio_seconds += sum(float(e["duration"]) for e in entries)
        row = {"set": set_name, "utterances": len(paths)}
        for name in names if k % 2 == 0 else list(reversed(names)):
            start, cpu_start = time.perf_counter(), cpu_seconds()
            texts = systems[name](paths)
            seconds[name] += time.perf_counter() - start
            cpu[name] += cpu_seconds() - cpu_start
            hyps = [manifest_text(t) for t in texts]
            row[name] = score([Path(p).stem for p in paths], [e["text"] for e in entries], hyps,
                              [float(e["duration"]) for e in entries]).summary["wer"]
        rows.append(row)
        print(f"  {set_name}: " + ", ".join(f"{n.split(' ')[0]} {100 * row[n]:.2f} %" for n in names), file=err)
    worded = {name: sum(bool(manifest_text(t)) for t in systems[name](noise)) for name in names}
    clip = five_second_clip(next(iter(sets.values())), args.out)
    latency = {}
    for name in names:
        start = time.perf_counter()
        systems[name]([str(clip)])
        latency[name] = time.perf_counter() - start
    throughput = {name: audio_seconds / seconds[name] for name in names}
    ratio = throughput[names[0]] / throughput[names[1]]
    per_cpu = {name: audio_seconds / cpu[name] for name in names}
    cpu_ratio = per_cpu[names[0]] / per_cpu[names[1]]
    report = {"model": str(args.model), "ours": described, "threads": args.threads, "rows": rows,
              "non_speech_clips": len(noise), "clips_with_words": worded, "throughput_rtfx": throughput,
              "throughput_ratio": ratio, "audio_per_cpu_second": per_cpu, "cpu_throughput_ratio": cpu_ratio,
              "latency_seconds": latency, "clip": str(clip),
              "audio_seconds": round(audio_seconds, 1)}
    write_text_atomic(args.out / "asr_vs_whisper.json", json.dumps(report, indent=1) + "\n")
    print(f"| set | utterances | {names[0]} | {names[1]} | ours / whisper |", file=out)
    print("|---|---|---|---|---|", file=out)
    for row in rows:
        r = row[names[0]] / row[names[1]] if row[names[1]] else float("nan")
        print(f"| {row['set']} | {row['utterances']} | {100 * row[names[0]]:.2f} | {100 * row[names[1]]:.2f} | {r:.2f} |",
              file=out)
    print(f"| non-speech clips with any word | {len(noise)} | {worded[names[0]]} | {worded[names[1]]} | |", file=out)
    print(f"| throughput (x real time) | {audio_seconds / 60:.1f} min | {throughput[names[0]]:.1f} | "
          f"{throughput[names[1]]:.1f} | {ratio:.2f} |", file=out)
    print(f"| audio seconds per CPU second | {audio_seconds / 60:.1f} min | {per_cpu[names[0]]:.1f} | "
          f"{per_cpu[names[1]]:.1f} | {cpu_ratio:.2f} |", file=out)
    print(f"| {Path(clip).name} alone (s) | 1 | {latency[names[0]]:.2f} | {latency[names[1]]:.2f} | |", file=out)
    print(f"asr_vs_whisper: {args.threads} threads; wrote {args.out / 'asr_vs_whisper.json'}", file=out)


if __name__ == "__main__":
    sys.exit(main())
