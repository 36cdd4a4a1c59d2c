r"""Recordings longer than Whisper's 30 s window: NeMo's own API, our engines and the voice pipeline on the same files.

Usage:
  python bench/long_recordings.py --model experiments/demo_asr/demo_asr.nemo --real-speech ../shared/real_speech \
      --seconds 35 60 600 --out experiments/bench/long_recordings
  python bench/long_recordings.py --model experiments/demo_asr/demo_asr.nemo --seconds 35 60   # the sample's voices

Each recording joins consecutive utterances of one held-out set (--set, default read_sentences; the sample's
test-clean voices without --real-speech) with --gap seconds of silence between them, until it is at least the
length asked; its reference is their transcripts joined. Each is then transcribed whole by:
- NeMo's API: ``ASRModel.restore_from(model).transcribe([file])`` (NeMo's greedy decoding; the Whisper encoder
  windows input past its 30 s of learned positions itself);
- our engines, greedy (``nemo_recipes/evaluate_ctc.py --decoding greedy``; ``--engine torch`` and ``onnx``, the int8
  export, made once beside the model);
- the voice pipeline (``duet.pipeline.VoicePipeline.transcribe``): cut at pauses, each piece decoded as
  tools/pipeline.py decodes the model (its decoding.json: the joint decoding for the demo's model);
and, as the reference the pipeline should match, each utterance decoded alone with that decoding and the texts joined.
Prints the WER and the seconds of each; writes long_recordings.json and the recordings it built under --out.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from pathlib import Path

import numpy as np
import soundfile as sf
import torch
from nemo.collections.asr.models import ASRModel

from duet import SAMPLES_DIR
from duet.asr.decoding import build_decoder, decoding_settings
from duet.asr.generalisation import SAMPLE_TEST_SET, build_manifest, real_sets
from duet.asr.inference import load_asr_model, load_audio, transcribe_files
from duet.asr.onnx_engine import load_onnx_model
from duet.asr.onnx_export import int8_export_beside
from duet.asr.scoring import score
from duet.data.manifest import build_split_manifest, read_manifest
from duet.cli.cli_args import resolve_asr_decoding
from duet.errors import DuetError
from duet.foundation import EXPERIMENTS
from duet.foundation.errors import cli
from duet.foundation.files import add_log_arguments, library_output_to, log_target, write_text_atomic
from duet.pipeline import PipelineSettings, VoicePipeline

SAMPLE_RATE = 16000


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, required=True, help="our .nemo CTC model")
    parser.add_argument("--real-speech", type=Path, default=None,
                        help="../shared/real_speech: join utterances of its --set (default: the sample's test-clean)")
    parser.add_argument("--set", default="read_sentences", help="the held-out real set to join (default %(default)s)")
    parser.add_argument("--seconds", type=float, nargs="+", default=[35.0, 60.0],
                        help="the recordings' lengths, at least (default: 35 60)")
    parser.add_argument("--gap", type=float, default=0.3, help="silence between the utterances, seconds")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (default 1)")
    parser.add_argument("--no-onnx", action="store_true", help="skip the ONNX engine (and its export)")
    parser.add_argument("--out", type=Path, default=EXPERIMENTS / "bench" / "long_recordings")
    add_log_arguments(parser, "long_recordings")
    return parser


def source_entries(args) -> tuple[str, list[dict]]:
    if args.real_speech is None:
        return SAMPLE_TEST_SET, build_split_manifest(SAMPLES_DIR / "LibriSpeech" / "test-clean").entries
    (chosen,) = real_sets(args.real_speech, (args.set,))  # a missing folder or set: one line naming it
    return args.set, read_manifest(build_manifest(chosen, args.out / "manifests"))


def join_utterances(entries: list[dict], seconds: float, gap: float, path: Path) -> dict:
    """The first utterances of ``entries`` joined with ``gap`` s of silence until ``seconds``: written to ``path``;
    its manifest entry, with the utterances it holds."""
    pieces, used, total = [], [], 0.0  # total: the recording so far, no silence after its last utterance
    silence = np.zeros(int(gap * SAMPLE_RATE), dtype=np.float32)
    for entry in entries:
        if total >= seconds:
            break
        audio = load_audio(entry["audio_filepath"], SAMPLE_RATE)
        pieces += [silence, audio] if pieces else [audio]
        used.append(entry)
        total += len(audio) / SAMPLE_RATE + (gap if len(used) > 1 else 0.0)
    if total < seconds:
        raise DuetError(f"the set holds {total:.0f} s of speech, less than --seconds {seconds:g}")
    audio = np.concatenate(pieces)
    path.parent.mkdir(parents=True, exist_ok=True)
    sf.write(path, audio, SAMPLE_RATE)
    return {"audio_filepath": str(path), "duration": round(len(audio) / SAMPLE_RATE, 2),
            "text": " ".join(e["text"] for e in used), "utterances": used}


def timed(transcribe) -> tuple[str, float]:
    start = time.perf_counter()
    text = transcribe()
    return text, time.perf_counter() - start


def wer(recording: dict, text: str) -> float:
    name = Path(recording["audio_filepath"]).stem
    return score([name], [recording["text"]], [text], [recording["duration"]]).summary["wer"]


@functools.cache
def nemo_restored(model_path: Path):
    return ASRModel.restore_from(str(model_path), map_location="cpu")


def nemo_api(model_path: Path, path: str) -> str:
    """NeMo's own transcribe of the model NeMo's own restore read, as any NeMo CTC checkpoint is used (restored once,
    outside the time)."""
    (hypothesis,) = nemo_restored(model_path).transcribe([path], batch_size=1, verbose=False)
    return hypothesis if isinstance(hypothesis, str) else hypothesis.text


@cli
def main(argv: list[str] | None = None) -> int:
    args = get_parser().parse_args(argv)
    if not args.model.is_file():
        raise DuetError(f"--model: no such file: {args.model}")
    if args.threads < 1 or args.gap < 0 or min(args.seconds) <= 0:
        raise DuetError("--threads must be >= 1, --gap >= 0 and every --seconds > 0")
    torch.set_num_threads(args.threads)
    name, entries = source_entries(args)
    recordings = [join_utterances(entries, s, args.gap, args.out / f"{name.replace('/', '_')}_{s:g}s.flac")
                  for s in args.seconds]
    settings = resolve_asr_decoding(args.model, None, {}).settings  # as tools/pipeline.py decodes the model
    rows = []
    with library_output_to(log_target(args)) as (out, err):
        model = load_asr_model(args.model, device="cpu")
        greedy = build_decoder(model, decoding_settings())
        decoder = build_decoder(model, settings)
        pipeline = VoicePipeline(model, None, None, PipelineSettings(asr_model=args.model, asr_decoding=settings),
                                 decoder)
        onnx = None
        if not args.no_onnx:
            export = int8_export_beside(args.model, lambda line: print(f"long_recordings: {line}", file=err))
            onnx = load_onnx_model(export, int8=True, threads=args.threads)
            onnx_greedy = build_decoder(onnx, decoding_settings())
        nemo_restored(args.model)
        for recording in recordings:
            path = recording["audio_filepath"]
            paths = [e["audio_filepath"] for e in recording["utterances"]]
            systems = {
                "NeMo restore_from + transcribe (greedy)": lambda: nemo_api(args.model, path),
                "ours, torch, greedy": lambda: transcribe_files(model, [path], decoder=greedy, workers=1)[0],
                "ours, onnx int8, greedy": (lambda: transcribe_files(onnx, [path], decoder=onnx_greedy,
                                                                     workers=1)[0]) if onnx else None,
                f"voice pipeline, {settings.strategy} (cut at pauses)":
                    lambda: pipeline.transcribe(load_audio(path, SAMPLE_RATE))[0],
                f"each utterance alone, {settings.strategy}, joined":
                    lambda: " ".join(transcribe_files(model, paths, decoder=decoder, workers=1)),
            }
            for system, run in systems.items():
                if run is None:
                    continue
                text, seconds = timed(run)
                rows.append({"recording": Path(path).name, "duration": recording["duration"],
                             "utterances": len(paths), "system": system, "wer": wer(recording, text),
                             "seconds": round(seconds, 2), "text": text})
                print(f"{Path(path).name} ({recording['duration']:.0f} s, {len(paths)} utterances): {system}: "
                      f"WER {100 * rows[-1]['wer']:.2f} %, {seconds:.1f} s", file=out, flush=True)
    summary = {"model": str(args.model), "set": name, "decoding": settings.describe(), "threads": args.threads,
               "rows": rows}
    write_text_atomic(args.out / "long_recordings.json", json.dumps(summary, indent=1) + "\n")
    print(f"long_recordings: {len(recordings)} recording(s), {len(rows)} transcripts; {args.out / 'long_recordings.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
