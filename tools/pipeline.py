#!/usr/bin/env python
r"""Speech in, answer out: transcribe audio with the fine-tuned NeMo CTC model, answer with the GPT-2.

Usage:
  python tools/pipeline.py samples/LibriSpeech/test-clean/7005/700501/7005-700501-0000.flac
  python tools/pipeline.py a.flac b.wav --json > answers.jsonl    # one JSON object per file
  python tools/pipeline.py --manifest manifests/test-clean.json     # every audio_filepath of a manifest
  python tools/pipeline.py request.wav --speak answer.wav          # voice the answer (espeak-ng)
  python tools/pipeline.py talk.flac --asr-model my.nemo --slm-model my_gpt2/ --strategy sample --top-p 0.9
  # ASR beam search (NeMo beam_batch), alone or fused with a token n-gram LM (tools/train_ngram_lm.py)
  python tools/pipeline.py talk.flac --asr-decoding beam --beam-size 8
  python tools/pipeline.py talk.flac --asr-decoding beam_lm --lm experiments/lm/train-clean_token6.arpa \
      --alpha 0.3 --beta 2
  # cache-aware streaming ASR (a model trained with configs/fastconformer_small_streaming.yaml):
  # partial transcripts are printed as each chunk is decoded
  python tools/pipeline.py talk.flac --asr-model streaming.nemo --stream
  python tools/pipeline.py talk.flac --asr-model streaming.nemo --stream --json   # partials count + timings in the JSON
  # ASR through ONNX Runtime: the export of tools/export_onnx.py in <stem>_onnx/ beside the .nemo (--int8: its int8 graph)
  python tools/pipeline.py talk.flac --engine onnx --int8

Defaults are the models tools/demo.py fine-tunes on the bundled sample (see DEFAULT_ASR_MODEL and
DEFAULT_SLM_MODEL below). The ASR decoding, when no --asr-decoding/--beam-size/--lm/--alpha/--beta says
otherwise, is read from decoding.json in the ASR model's folder, if there is one; the demo writes one beside
its model (beam search with the demo's token LM at the width and weights tuned on dev-clean):
  {"strategy": "beam_lm", "beam_size": 16, "lm": "../demo_lm/lm_text_100k_token6.arpa", "alpha": 0.8, "beta": 4}
("lm" is relative to the file's folder). Options given replace its values, --asr-decoding greedy or --lm
set it aside, and the "asr_decoding" of the --json output ends with "from <that file>" when it was used.
A broken file (bad JSON, unknown key, missing LM) is a one-line error naming it. Any rate or channel count is read and resampled to the model's 16 kHz mono;
long recordings are cut at pauses into chunks of at most --max-chunk-seconds. Silence, or an empty
transcript, skips the language model with a note. A missing, empty or corrupt file is reported by name
and the other files still run; the exit code is 1 if any file failed. Latencies per stage (model load,
audio load, ASR, SLM, total) are printed, and are in the --json output with the ASR decoding used.

--stream feeds each file through NeMo's cache-aware streaming step chunk by chunk (greedy decoding; a long
file streams whole, the caches bound the memory). It reports the algorithmic latency (look-ahead and chunk
length), the wall time to the first partial and the median/max compute time per chunk; with --json these
are in a "streaming" object of each line and the partial transcripts themselves are not printed. An
offline model, or an LM that does not fit the model, is a one-line error before anything runs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from duet.asr.batching import OfflineBatching
from duet.asr.decoding import DecodingInputError
from duet.asr.streaming import describe_report, streaming_latency
from duet.cli_args import (
    DECODING_OPTIONS,
    add_decoding_arguments,
    add_engine_argument,
    decoding_settings_from_args,
    offline_batching_from_args,
)
from duet.decoding_file import USED, decoding_file_for, read_decoding_file
from duet.demo import DEMO_ASR_MODEL, DEMO_SLM_MODEL
from duet.errors import DuetError, cli
from duet.io import atomic_path, read_jsonl
from duet.pipeline import VoicePipeline
from slm.generation import GenerationSettingsError, add_generation_arguments, generation_settings_from_args

DEFAULT_ASR_MODEL = DEMO_ASR_MODEL
DEFAULT_SLM_MODEL = DEMO_SLM_MODEL
SPEAK_ENGINE = "espeak-ng"
SPEAK_ENGINE_MISSING = (f"--speak needs {SPEAK_ENGINE}, which is not installed "
                        "(apt-get install espeak-ng, or bash tools/setup.sh)")


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("audio", nargs="*", type=Path, help="audio files (FLAC, WAV, ...)")
    parser.add_argument("--manifest", type=Path, default=None, help="also process every audio_filepath in this manifest")
    parser.add_argument("--asr-model", type=Path, default=DEFAULT_ASR_MODEL, help="NeMo .nemo file")
    parser.add_argument("--slm-model", type=Path, default=DEFAULT_SLM_MODEL, help="Hugging Face model folder")
    parser.add_argument("--asr-batch-size", type=int, default=None,
                        help="pieces of audio per ASR batch (default: 8; not with --stream)")
    parser.add_argument("--max-chunk-seconds", type=float, default=None,
                        help="longest piece the ASR sees at once (default: 20; not with --stream)")
    parser.add_argument("--stream", action="store_true",
                        help="cache-aware streaming ASR with partial transcripts (streaming models only)")
    add_engine_argument(parser, "--asr-model")
    parser.add_argument("--int8", action="store_true", help="--engine onnx: the export's int8 graph")
    add_decoding_arguments(parser, "--asr-decoding", strategy_default=(
        "the decoding.json in the ASR model's folder (the demo writes one), each option given replacing its "
        "value; with --lm: beam_lm; with --stream or no such file: greedy"))
    add_generation_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON object per file (JSON Lines)")
    parser.add_argument("--speak", type=Path, default=None,
                        help="write the spoken answer to this WAV (several files: <stem>_<name>.wav beside it, "
                             "numbered when two inputs share a stem)")
    return parser


def speak(text: str, out_path: Path) -> str | None:
    """Voice ``text`` into ``out_path`` with espeak-ng; returns an error message naming the file, or None.

    espeak-ng writes a temporary file that is renamed into place, so a failure leaves no partial WAV.
    """
    engine = shutil.which(SPEAK_ENGINE)
    if engine is None:
        return SPEAK_ENGINE_MISSING
    try:
        with atomic_path(out_path) as partial:
            # "--" ends the options: an answer starting with "-" is text to say, not a flag
            result = subprocess.run([engine, "-v", "en-us", "-w", str(partial), "--", text], capture_output=True,
                                    text=True)
            if result.returncode != 0 or partial.stat().st_size == 0:
                raise RuntimeError(f"{SPEAK_ENGINE} failed: {result.stderr.strip() or f'exit code {result.returncode}'}")
    except RuntimeError as e:
        return str(e)
    except OSError as e:  # e.g. the folder cannot be made or written
        return f"cannot write {out_path}: {e.strerror or e}"
    return None


def speak_paths(audio: list[Path], speak_to: Path) -> list[Path]:
    """Where each file's spoken answer goes: ``speak_to`` itself for one file, else ``<stem>_<name>``
    beside it, numbered (``<index>_<stem>_<name>``) when two inputs share a stem."""
    if len(audio) == 1:
        return [speak_to]
    stems = [path.stem for path in audio]
    unique = len(set(stems)) == len(stems)
    return [speak_to.with_name(f"{stem}_{speak_to.name}" if unique else f"{i:04d}_{stem}_{speak_to.name}")
            for i, stem in enumerate(stems)]


@cli
def main(argv: list[str] | None = None) -> int:
    parser = get_parser()
    args = parser.parse_args(argv)
    if args.manifest:
        try:
            args.audio += [Path(entry["audio_filepath"]) for entry in read_jsonl(args.manifest)]
        except (OSError, ValueError, KeyError) as e:
            parser.error(f"--manifest {args.manifest}: {e}")
    if not args.audio:
        parser.error("no audio: give files or --manifest")
    for flag, path in (("--asr-model", args.asr_model), ("--slm-model", args.slm_model)):
        if not path.exists():
            raise DuetError(f"{flag} {path} does not exist (run python tools/demo.py first, or pass {flag})")
    if args.max_chunk_seconds is not None and args.max_chunk_seconds <= 0:
        parser.error(f"--max-chunk-seconds must be > 0, got {args.max_chunk_seconds:g}")
    if args.asr_batch_size is not None and args.asr_batch_size < 1:
        parser.error(f"--asr-batch-size must be >= 1, got {args.asr_batch_size}")
    if args.engine == "onnx" and args.stream:
        parser.error("--stream is not used with --engine onnx (the ONNX export decodes offline)")
    if args.int8 and args.engine != "onnx":
        parser.error("--int8 needs --engine onnx")
    if args.speak and args.speak.is_dir():
        parser.error(f"--speak {args.speak} is a folder: give the WAV file to write")
    if args.speak and shutil.which(SPEAK_ENGINE) is None:  # say so before minutes of model loading
        raise DuetError(SPEAK_ENGINE_MISSING)

    if not args.json:
        return run(args, json_out=None)
    # NeMo logs to standard output: keep it for the JSON lines alone, send everything else to stderr.
    sys.stdout.flush()
    saved_stdout = os.dup(1)
    json_out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    try:
        return run(args, json_out)
    finally:
        sys.stdout.flush()
        os.dup2(saved_stdout, 1)
        os.close(saved_stdout)
        json_out.close()


def resolve_asr_decoding(args: argparse.Namespace) -> str | None:
    """Fill in the ASR decoding left unsaid; returns the decoding.json it came from (and the options given over
    it), or None when the options alone decide.

    Without --asr-decoding (or with the strategy the file names) and without --lm, the decoding.json in the
    model's folder is used, each option given replacing its value. ``--lm`` alone means beam_lm with that LM at
    the library's weights (the file's were tuned for its own LM). No file, and ``--stream``: greedy. Beam
    options that greedy by default would ignore are a ``DecodingInputError`` saying why."""
    if args.stream:  # streaming decodes greedily; decoding_settings_from_args names any option it would ignore
        args.ctc_decoding = args.ctc_decoding or "greedy"
        return None
    if args.lm is not None:
        args.ctc_decoding = args.ctc_decoding or "beam_lm"
        return None
    saved_path = decoding_file_for(args.asr_model)
    saved = (read_decoding_file(saved_path) if args.ctc_decoding in (None, "beam", "beam_lm") and saved_path.is_file()
             else None)
    given = [flag for flag, attr in DECODING_OPTIONS if getattr(args, attr) is not None]
    if saved is not None and saved.strategy != "greedy" and args.ctc_decoding in (None, saved.strategy):
        args.ctc_decoding = saved.strategy
        values = {"beam_size": saved.beam_size, "lm": saved.ngram_lm, "alpha": saved.alpha, "beta": saved.beta}
        for attr, value in values.items():
            if getattr(args, attr) is None and attr in USED[saved.strategy]:
                setattr(args, attr, value)
        return f"{saved_path}, {', '.join(given)} given" if given else str(saved_path)
    if args.ctc_decoding is None:
        args.ctc_decoding = "greedy"
        if given:
            why = f"{saved_path} says greedy" if saved is not None else f"there is no {saved_path}"
            raise DecodingInputError(f"{', '.join(given)} needs --asr-decoding beam or beam_lm: this model "
                                     f"decodes greedily by default ({why})")
    return None


def run(args: argparse.Namespace, json_out) -> int:
    try:
        generation = generation_settings_from_args(args)  # bad language-model options fail here, before loading
    except GenerationSettingsError as e:
        raise DuetError(f"language model decoding: {e}") from e
    asr_decoding_source = resolve_asr_decoding(args)
    asr_decoding = decoding_settings_from_args(args, "--asr-decoding", streaming=args.stream)
    batching = offline_batching_from_args(args, OfflineBatching(batch_size=8, max_chunk_seconds=20.0),
                                          {"batch_size": "--asr-batch-size", "max_chunk_seconds": "--max-chunk-seconds"},
                                          streaming=args.stream)
    pipeline, load_s = VoicePipeline.load(args.asr_model, args.slm_model, generation=generation,
                                          max_chunk_s=batching.max_chunk_seconds, asr_batch_size=batching.batch_size,
                                          asr_decoding=asr_decoding, asr_decoding_source=asr_decoding_source,
                                          stream=args.stream, engine=args.engine, int8=args.int8)
    if not args.json:
        print(f"models loaded in {load_s:.1f} s (ASR {args.asr_model.name}, {pipeline.describe_asr_decoding()} "
              f"decoding, SLM {args.slm_model})")
        if args.stream:
            print(f"streaming: {streaming_latency(pipeline.asr_model).describe()}")
    failures = 0
    spoken_paths = speak_paths(args.audio, args.speak) if args.speak else [None] * len(args.audio)
    for path, spoken_path in zip(args.audio, spoken_paths):
        on_partial = None if args.json else partial_printer(path)
        result = pipeline.run(path, on_partial=on_partial)
        result.latency_s["model_load"] = round(load_s, 3)
        if result.error is None and spoken_path and result.response:
            result.error = speak(result.response, spoken_path)
            result.note = result.note or (None if result.error else f"spoken answer: {spoken_path}")
        failures += result.error is not None
        if args.json:
            print(json.dumps(result.to_json(), ensure_ascii=False), file=json_out, flush=True)
            continue
        if result.transcript is None:  # the file itself could not be read
            print(f"\n{path}: error: {result.error}", file=sys.stderr)
            continue
        lat = result.latency_s
        print(f"\n{path} ({result.audio_seconds:.1f} s)")
        print(f"  transcript: {result.transcript or '(none)'}")
        print(f"  response:   {result.response or '(none)'}")
        if result.note:
            print(f"  note:       {result.note}")
        if result.streaming:
            st = result.streaming
            print(f"  streaming:  {st['partials']} partials, first after {st['first_partial_s'] * 1000:.0f} ms "
                  f"({st['first_partial_audio_s']:.2f} s of audio); {describe_report(st)}")
        print("  latency:    " + ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in lat.items() if k != "model_load"))
        if result.error:  # e.g. the answer could not be spoken
            print(f"{path}: error: {result.error}", file=sys.stderr)
    if not args.json:
        print(f"\npipeline: {len(args.audio)} file(s), {failures} failed")
    return 1 if failures else 0


def partial_printer(path: Path):
    """Print a file's partial transcripts as they arrive, each time the text grows or changes."""
    shown = [""]

    def show(partial) -> None:
        if partial.text and partial.text != shown[0] and not partial.is_final:
            shown[0] = partial.text
            print(f"{path.name} partial @ {partial.audio_seconds:.2f} s: {partial.text}", flush=True)
    return show


if __name__ == "__main__":
    sys.exit(main())
