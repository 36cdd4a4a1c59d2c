#!/usr/bin/env python
r"""Speech in, answer out: transcribe audio with the fine-tuned NeMo CTC model, answer with the GPT-2.

Usage:
  python tools/pipeline.py samples/LibriSpeech/test-clean/7005/700501/7005-700501-0000.flac
  python tools/pipeline.py a.flac b.wav --json > answers.jsonl    # one JSON object per file
  python tools/pipeline.py recordings/ --json > answers.jsonl       # every audio file under a folder (recursive)
  python tools/pipeline.py --manifest manifests/test-clean.json     # every audio_filepath of a manifest
  python tools/pipeline.py request.wav --speak answer.wav          # voice the answer (espeak-ng)
  python tools/pipeline.py talk.flac --asr-model my.nemo --slm-model my_gpt2/ --strategy sample --top-p 0.9
  # ASR beam search (NeMo beam_batch), alone or fused with a token n-gram LM (tools/train_ngram_lm.py)
  python tools/pipeline.py talk.flac --asr-decoding beam --beam-size 8
  python tools/pipeline.py talk.flac --asr-decoding beam_lm --lm experiments/lm/train-clean_token6.arpa \
      --alpha 0.3 --beta 2
  # joint decoding: Whisper tiny.en's beam search proposes beside the CTC beam, the CTC model judges (duet/asr/decoding/joint.py)
  python tools/pipeline.py talk.flac --asr-decoding joint --ctc-weight 0.5
  # cache-aware streaming ASR (a model trained with configs/fastconformer_small_streaming.yaml):
  # partial transcripts are printed as each chunk is decoded
  python tools/pipeline.py talk.flac --asr-model streaming.nemo --stream
  python tools/pipeline.py talk.flac --asr-model streaming.nemo --stream --json   # partials count + timings in the JSON
  # a live source: "-" reads raw 16 kHz mono signed 16-bit little-endian PCM from standard input as it arrives
  sox talk.flac -t raw -r 16000 -c 1 -b 16 -e signed - | python tools/pipeline.py --stream --asr-model m.nemo -
  arecord -f S16_LE -r 16000 -c 1 -t raw | python tools/pipeline.py --stream --asr-model m.nemo -
  # ASR through ONNX Runtime: the export of tools/export_onnx.py in <stem>_onnx/ beside the .nemo (--int8: its int8 graph)
  python tools/pipeline.py talk.flac --engine onnx --int8
  # answer whatever was heard, however unsure (no "Sorry, I didn't catch that.")
  python tools/pipeline.py talk.flac --min-confidence 0

Defaults are the models tools/demo.py fine-tunes on the bundled sample, the language model the slm_whisper_offline
preset's (experiments/slm_whisper) once it has been trained (PipelineSettings in duet/pipeline.py, from
duet/demo/models.py). The ASR decoding, when no decoding option (--asr-decoding, --beam-size, --lm, ...) says
otherwise, is read from the ASR model's decoding file, if there is one: <stem>.decoding.json beside a .nemo, else
decoding.json in its folder; the demo writes one beside its model (joint decoding: Whisper tiny.en's beam search
and the CTC beam with the demo's token LM propose, the fine-tuned CTC model judges, at the weights chosen on held-in
data, and the model's low-confidence threshold; `cat experiments/demo_asr/decoding.json` shows it): its keys are
the decoding options' names ("lm" for --lm, relative to the file's folder) and "min_confidence". Options given replace its values, --asr-decoding greedy or --lm
set it aside, and the "asr_decoding" of the --json output ends with "from <that file>" when it was used.
A broken file (bad JSON, unknown key, missing LM) is a one-line error naming it. Any rate or channel count is read and resampled to the model's 16 kHz mono;
long recordings are cut at pauses into chunks of at most --max-chunk-seconds. Silence, or an empty transcript,
skips the language model with a note. A missing, empty or corrupt file is named before the models load and the
other files still run; the exit code is 1 if any file failed. When no file can run, or a model is missing, that
is one line (exit 2) naming every missing input and what to run or pass. The first line printed says which ASR
decoding is used and where it came from; NeMo's and transformers' log lines go to --log
(experiments/logs/pipeline.log), or with --verbose to standard error: standard output carries the answers.
Latencies per stage (model load, audio load, ASR, SLM, total) are printed, and are in the --json output with
the ASR decoding used, and with the transcript's "words": each word's start and end in seconds from the start
of the file and its confidence in [0, 1] (NeMo's greedy CTC timestamps and max-probability confidence; under beam
search, the beam's transcript force-aligned to the same CTC output with NeMo's Viterbi and read the same way; null
with --stream). A folder stands for the audio files under it (.flac, .wav, .mp3, .ogg, .opus, ... in any case;
recursive, sorted); one without any is an error naming it.

A transcript heard unsurely is not answered: its "confidence" (the mean of its word confidences,
duet/asr/confidence.py) below --min-confidence makes it "understood": false, and the response "Sorry, I didn't
catch that." instead of the language model's (which is not asked; the note says why). Each --json line carries
both, e.g. "confidence": 0.23, "understood": false; the console prints the confidence under the transcript.
--min-confidence 0 turns the check off; with --stream there are no word confidences ("confidence": null) and no
check. The default threshold was chosen with bench/confidence_threshold.py; re-choose it there for another model.

--stream feeds each file through NeMo's cache-aware streaming step chunk by chunk (greedy decoding; a long
file streams whole, the caches bound the memory); features and their normalisation are computed chunk by
chunk too (duet/asr/streaming.py), so "-" (with --stream, alone) streams standard input live: raw PCM as
above, no header, read in 100 ms pieces, partials printed as they come, answered when the input ends.
It reports the algorithmic latency (look-ahead and chunk length), the wall time to the first partial and
the median/max compute time per chunk; with --json these are in a "streaming" object of each line and the
partial transcripts themselves are not printed. An offline model, or an LM that does not fit the model, is
a one-line error before anything runs.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from duet.asr.streaming import describe_report, read_pcm16, streaming_latency
from duet.cli.cli_args import (add_decoding_options, add_log_arguments, add_model_arguments, log_target,
                               model_path_problems, pipeline_settings_from_args)
from duet.errors import DuetError
from duet.io import audio_file_problem, expand_audio_paths
from duet.pipeline import PipelineResult, PipelineSettings, VoicePipeline
from duet.speech_out import SPEAK_ENGINE, SPEAK_ENGINE_MISSING, speak
from duet.foundation.errors import cli
from duet.foundation.files import library_output_to, read_jsonl

STDIN = Path("-")  # the audio argument that streams raw PCM from standard input


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("audio", nargs="*", type=Path,
                        help="audio files (FLAC, WAV, ...) or folders of them; - = raw 16 kHz mono PCM16 from stdin "
                             "(--stream only)")
    parser.add_argument("--manifest", type=Path, default=None, help="also process every audio_filepath in this manifest")
    add_model_arguments(parser, streaming=True)
    parser.add_argument("--stream", action="store_true",
                        help="cache-aware streaming ASR with partial transcripts (streaming models only)")
    add_decoding_options(parser, streaming=True)
    parser.add_argument("--json", action="store_true", help="print one JSON object per file (JSON Lines)")
    parser.add_argument("--speak", type=Path, default=None,
                        help="write the spoken answer to this WAV (several files: <stem>_<name>.wav beside it, "
                             "numbered when two inputs share a stem)")
    add_log_arguments(parser, "pipeline")
    return parser


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
    args.audio = expand_audio_paths(args.audio)
    if not args.audio:
        parser.error("no audio: give files or --manifest")
    if STDIN in args.audio and (not args.stream or len(args.audio) > 1):
        parser.error("- (raw PCM from standard input) needs --stream and no other audio")
    if args.engine == "onnx" and args.stream:
        parser.error("--stream is not used with --engine onnx (the ONNX export decodes offline)")
    if args.speak and args.speak.is_dir():
        parser.error(f"--speak {args.speak} is a folder: give the WAV file to write")
    if args.speak and shutil.which(SPEAK_ENGINE) is None:  # say so before minutes of model loading
        raise DuetError(SPEAK_ENGINE_MISSING)
    settings, decoding_line = pipeline_settings_from_args(args)
    # every missing or unreadable input, named before minutes of model loading: one line when nothing can run
    bad_audio = {path: problem for path in args.audio if path != STDIN and (problem := audio_file_problem(path))}
    problems = model_path_problems(settings.asr_model, settings.slm_model)
    if all(path in bad_audio for path in args.audio) or problems:
        raise DuetError("; ".join([*bad_audio.values(), *problems]))
    for path, problem in bad_audio.items():
        print(f"{path}: error: {problem}", file=sys.stderr)
    if not args.json:
        print(decoding_line, flush=True)
    # NeMo and transformers log to standard output and error: their lines go to --log (or, with --verbose, to
    # standard error), so that standard output carries the answers alone
    with library_output_to(log_target(args)) as (out, err):
        return run(args, settings, bad_audio, out, err)


def run(args: argparse.Namespace, settings: PipelineSettings, bad_audio: dict, out, err) -> int:
    """Answer every file of ``args.audio`` (the entry script's own options: --json, --speak) with a pipeline loaded
    as ``settings`` say."""
    pipeline, load_s = VoicePipeline.load(settings)
    if not args.json:
        print(f"models loaded in {load_s:.1f} s (ASR {settings.asr_model.name}, SLM {settings.slm_model})", file=out)
        if settings.stream:
            print(f"streaming: {streaming_latency(pipeline.asr_model).describe()}", file=out)
    failures = 0
    spoken_paths = speak_paths(args.audio, args.speak) if args.speak else [None] * len(args.audio)
    for path, spoken_path in zip(args.audio, spoken_paths):
        on_partial = None if args.json else partial_printer(Path("stdin") if path == STDIN else path, out)
        if path in bad_audio:  # named on the console before the models loaded
            result = PipelineResult(file=str(path), error=bad_audio[path],
                                    asr_decoding=pipeline.describe_asr_decoding())
        elif path == STDIN:
            result = pipeline.run_live(read_pcm16(sys.stdin.buffer), name="stdin", on_partial=on_partial)
        else:
            result = pipeline.run(path, on_partial=on_partial)
        result.latency_s["model_load"] = round(load_s, 3)
        if result.error is None and spoken_path and result.response:
            result.error = speak(result.response, spoken_path)
            result.note = result.note or (None if result.error else f"spoken answer: {spoken_path}")
        failures += result.error is not None
        if args.json:
            print(json.dumps(result.to_json(), ensure_ascii=False), file=out, flush=True)
            continue
        if result.transcript is None:  # the file itself could not be read
            if path not in bad_audio:
                print(f"\n{path}: error: {result.error}", file=err)
            continue
        lat = result.latency_s
        print(f"\n{result.file} ({result.audio_seconds:.1f} s)", file=out)
        print(f"  transcript: {result.transcript or '(none)'}", file=out)
        if result.confidence is not None:
            print(f"  confidence: {result.confidence:.2f}" + ("" if result.understood else
                  f" (below {pipeline.settings.min_confidence:g}: NOT UNDERSTOOD, the language model was not asked)"), file=out)
        print(f"  response:   {result.response or '(none)'}", file=out)
        if result.withheld is not None:  # the model's own answer, replaced because it was unsure of a word of it
            print(f"  withheld:   {result.withheld} (the model was unsure of it)", file=out)
        if result.note:
            print(f"  note:       {result.note}", file=out)
        if result.streaming:
            st = result.streaming
            print(f"  streaming:  {st['partials']} partials, first after {st['first_partial_s'] * 1000:.0f} ms "
                  f"({st['first_partial_audio_s']:.2f} s of audio); {describe_report(st)}", file=out)
        print("  latency:    " + ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in lat.items() if k != "model_load"),
              file=out)
        if result.error:  # e.g. the answer could not be spoken
            print(f"{path}: error: {result.error}", file=err)
    if not args.json:
        print(f"\npipeline: {len(args.audio)} file(s), {failures} failed", file=out)
    return 1 if failures else 0


def partial_printer(path: Path, out):
    """Print a file's partial transcripts to ``out`` as they arrive, each time the text grows or changes."""
    shown = [""]

    def show(partial) -> None:
        if partial.text and partial.text != shown[0] and not partial.is_final:
            shown[0] = partial.text
            print(f"{path.name} partial @ {partial.audio_seconds:.2f} s: {partial.text}", file=out, flush=True)
    return show


if __name__ == "__main__":
    sys.exit(main())
