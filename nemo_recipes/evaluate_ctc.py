r"""Transcribe a NeMo manifest (or audio files) with a CTC .nemo model and report WER/CER.

Usage:
  # score a manifest: per-utterance JSONL + summary JSON, worst/best table printed
  python nemo_recipes/evaluate_ctc.py --model experiments/fastconformer_small/fastconformer_small.nemo \
      --manifest manifests/test-clean.json --out-dir results/test-clean

  # CPU speed-up: dynamic int8 quantisation of the Linear layers (report the WER change it causes)
  python nemo_recipes/evaluate_ctc.py --model base.nemo --manifest manifests/test-clean.json --int8

  # plain transcription of files (no references): one "path<TAB>text" line each; a folder means every audio
  # file under it (recursively, sorted)
  python nemo_recipes/evaluate_ctc.py --model base.nemo --audio a.flac b.wav recordings/

  # beam search (NeMo beam_batch), optionally fused with a token n-gram LM built by tools/train_ngram_lm.py
  python nemo_recipes/evaluate_ctc.py --model base.nemo --manifest manifests/test-clean.json \
      --decoding beam --beam-size 8
  python nemo_recipes/evaluate_ctc.py --model base.nemo --manifest manifests/test-clean.json --decoding beam_lm \
      --lm experiments/lm/train-clean_token6.arpa --alpha 0.3 --beta 2.0
  # ... its candidates rescored by Whisper tiny.en's decoder, which reads the audio (the demo's decoding until the
  # joint decoding, which its decoding.json now names and this command then uses by default)
  python nemo_recipes/evaluate_ctc.py --model experiments/demo_asr/demo_asr.nemo \
      --manifest manifests/test-clean.json --decoding beam_lm --beam-size 16 \
      --lm experiments/demo_lm/lm_text_token6.arpa --alpha 1.1 --beta 4 --whisper-weight 0.5

  # ONNX Runtime on the export of tools/export_onnx.py (base_onnx/ beside base.nemo), here its int8 graph
  python nemo_recipes/evaluate_ctc.py --model base.nemo --engine onnx --int8 --manifest manifests/test-clean.json

  # cache-aware streaming (a model trained with configs/fastconformer_small_streaming.yaml): chunk by chunk,
  # the summary adds look-ahead, chunk length and the median/max compute time per chunk
  python nemo_recipes/evaluate_ctc.py --model streaming.nemo --manifest manifests/test-clean.json --stream

Files are decoded in duration-sorted batches under torch.inference_mode (on CPU by --workers processes, or
--workers threads with --engine onnx);
text is lower-cased and stripped of punctuation (except apostrophes) on both sides before jiwer counts
errors.
Outputs (with --manifest): <out-dir>/<prefix>_utterances.jsonl (id, ref, hyp, wer, and "words": each word's
start and end in seconds and its confidence in [0, 1], from NeMo's greedy CTC timestamps and max-probability
confidence, e.g. {"word": "degrees", "start": 0.32, "end": 1.04, "confidence": 0.7642}; under beam search, for
which NeMo computes neither, the beam's transcript force-aligned to the same CTC output with NeMo's Viterbi and
read the same way; --no-word-timestamps leaves them out) and
<out-dir>/<prefix>_summary.json (wer, cer, substitutions, deletions, insertions, rtfx, decoding, and with
--stream a "streaming" object: lookahead_ms, chunk_ms, chunks, chunk_compute_ms_median/_max).
Streaming decodes greedily, one file at a time; the wrong LM (missing, or built for another tokenizer)
or a non-streaming model with --stream is a one-line error.
The decoding is the model's decoding.json (the demo's model: the joint decoding), as tools/pipeline.py decodes,
each decoding option given replacing its own value; --decoding another strategy, --lm alone (beam_lm with that
LM at the library's weights), or a model without the file decode with the options given alone (greedy when none
is). Before the model loads, the decoding is printed with
where it came from ("decoding: greedy (default: no results/decoding.json)", "decoding: beam8 (given: --decoding beam
--beam-size 8)", "decoding: joint(...) from experiments/demo_asr/decoding.json"), and every audio file that is missing or cannot be
read is named on a line of its own and skipped: the others are scored, the summary counts the skipped ones and
the exit code is 1. NeMo's log lines go to --log (experiments/logs/evaluate_ctc.log) unless --verbose shows them,
and a progress bar, on standard error; standard output carries the results.
"""

import argparse
import json
import sys
import time
from pathlib import Path

from duet.asr import decoding, evaluation, inference, scoring, streaming
from duet.asr.batching import EVALUATION_BATCHING, OfflineBatching
from duet.asr.onnx_engine import load_onnx_model
from duet.cli.cli_args import (add_batching_arguments, add_decoding_arguments, add_engine_argument, add_log_arguments,
                           ModelDecoding, given_decoding_values, log_target, offline_batching_from_args,
                           resolve_asr_decoding)
from duet.errors import DuetError
from duet.io import audio_file_problem, expand_audio_paths
from duet.data.manifest import read_manifest
from duet.foundation.errors import cli
from duet.foundation.files import library_output_to


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, type=Path,
                        help="a .nemo checkpoint (with --engine onnx also its export folder)")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--manifest", type=Path, help="NeMo manifest with audio_filepath, duration, text")
    source.add_argument("--audio", nargs="+", type=Path,
                        help="audio files or folders of them (recursive) to transcribe (no scoring)")
    parser.add_argument("--out-dir", type=Path, default=None, help="where results go (default: beside the manifest's name under results/)")
    parser.add_argument("--prefix", default="eval", help="output file prefix (default: eval)")
    parser.add_argument("--int8", action="store_true", help="dynamic int8 quantisation of Linear layers (CPU); "
                        "with --engine onnx the export's int8 graph")
    add_engine_argument(parser)
    add_batching_arguments(parser, EVALUATION_BATCHING, streaming=True)
    parser.add_argument("--device", choices=["cpu", "cuda"], default=None, help="default: cuda if available")
    parser.add_argument("--show", type=int, default=5, help="worst/best utterances to print (default: 5)")
    parser.add_argument("--stream", action="store_true",
                        help="cache-aware streaming, chunk by chunk (models trained for it; greedy decoding)")
    parser.add_argument("--word-timestamps", action=argparse.BooleanOptionalAction, default=None,
                        help="word times and confidences in the per-utterance JSONL (default: on, except with "
                             "--stream, which has none)")
    add_decoding_arguments(parser, "--decoding", strategy_default="the model's decoding.json, as tools/pipeline.py "
                                                                  "decodes; greedy without one")
    add_log_arguments(parser, "evaluate_ctc")
    return parser


@cli
def main(argv=None) -> int:
    args = get_parser().parse_args(argv)
    # the model's decoding.json (beside the .nemo, or its export's), each option given replacing its own value, as
    # the pipeline and the server decode; --stream and a model without one: greedy
    chosen = resolve_asr_decoding(args.model, args.ctc_decoding, given_decoding_values(args), args.stream,
                                  strategy_flag="--decoding")
    batching = offline_batching_from_args(args, EVALUATION_BATCHING, streaming=args.stream)
    if args.stream and args.word_timestamps:
        raise DuetError("--word-timestamps is not available with --stream (the streaming path gives no word times)")
    if args.word_timestamps and args.audio:
        raise DuetError("--word-timestamps goes with --manifest (--audio prints text lines)")
    if args.engine == "torch" and not args.model.is_file():
        raise DuetError(f"--model {args.model} does not exist")
    # every unreadable audio file, named before the model loads; the others are still transcribed
    if args.audio:
        args.audio = expand_audio_paths(args.audio)
        paths = list(map(str, args.audio))
    else:
        paths = [entry["audio_filepath"] for entry in read_manifest(args.manifest)]
        if not paths:
            raise DuetError(f"manifest is empty: {args.manifest}")
    bad = {path: problem for path in dict.fromkeys(paths) if (problem := audio_file_problem(path))}
    if len(bad) == len(set(paths)):
        raise DuetError(f"no readable audio: {'; '.join(list(bad.values())[:3])}"
                        + (f" (and {len(bad) - 3} more)" if len(bad) > 3 else ""))
    for problem in bad.values():
        print(f"evaluate_ctc: skipped {problem}", file=sys.stderr)
    if args.audio:
        args.audio = [path for path in args.audio if str(path) not in bad]
    print(f"evaluate_ctc: decoding: {chosen.describe()}", file=sys.stderr)
    if not args.verbose:
        print(f"evaluate_ctc: NeMo's log lines: {args.log} (--verbose shows them, and a progress bar)",
              file=sys.stderr)
    with library_output_to(log_target(args)) as (out, err):
        code = run(args, chosen, batching, set(bad), out, err)
    return 1 if bad else code


def run(args, chosen: ModelDecoding, batching: OfflineBatching, skip: set[str], out, err) -> int:
    """Load the model, transcribe (and score) what ``args`` name but ``skip`` as ``chosen`` says; results on
    ``out``."""
    settings, origin = chosen.settings, chosen.origin
    model = load_model(args)
    if args.stream:
        streaming.check_streaming_model(model)
    decoder = decoding.build_decoder(model, settings)
    if args.int8 and args.engine == "torch":
        inference.quantize_linear_int8(model)
    if args.audio:
        return transcribe_only(model, decoder, args, batching, out, err)
    if args.stream:
        scored = streaming.evaluate_manifest_streaming(model, args.manifest, progress=args.verbose, skip=skip)
    else:
        scored = evaluation.evaluate_manifest(model, args.manifest, batch_size=batching.batch_size,
                                             workers=batching.workers, words=args.word_timestamps is not False,
                                             progress=args.verbose, skip=skip, decoder=decoder)
    scored.summary.update(model=str(args.model), engine=args.engine, int8=args.int8, decoding=settings.describe(),
                          decoding_source=origin)
    out_dir = args.out_dir or Path("results") / args.manifest.stem
    utt_path, summary_path = scoring.write_results(scored, out_dir, args.prefix)
    print(scoring.format_examples(scored.records, args.show), file=out)
    s = scored.summary
    print(json.dumps(s, indent=2), file=out)
    skipped = f", {s['skipped']} skipped (unreadable audio)" if s["skipped"] else ""
    print(
        f"evaluate_ctc: WER {100 * s['wer']:.2f}% CER {100 * s['cer']:.2f}% "
        f"(S {s['substitutions']} D {s['deletions']} I {s['insertions']} / {s['reference_words']} words) "
        f"on {s['utterances']} utterances{skipped}, RTFx {s['rtfx']}, {s['decoding']}; wrote {utt_path} and "
        f"{summary_path}", file=out
    )
    if args.stream:
        st = s["streaming"]
        print(f"evaluate_ctc: streaming: {streaming.describe_report(st)} over {st['chunks']} chunks", file=out)
    return 0


def load_model(args):
    """The NeMo model (``--engine torch``) or its ONNX export (``--engine onnx``, CPU, offline only)."""
    if args.engine == "torch":
        return inference.load_asr_model(args.model, device="cpu" if args.int8 else args.device)
    for flag, given in (("--stream", args.stream), ("--device", args.device), ("--workers", args.workers)):
        if given:
            raise DuetError(f"{flag} is not used with --engine onnx (ONNX Runtime on CPU, offline batches, its own threads)")
    return load_onnx_model(args.model, int8=args.int8)


def transcribe_only(model, decoder, args, batching: OfflineBatching, out, err) -> int:
    """--audio: one "path<TAB>text" line per file on ``out``, timings on ``err``."""
    start = time.perf_counter()
    if args.stream:
        texts, partials = streaming.transcribe_files_streaming(model, args.audio, progress=args.verbose)
    else:
        texts = inference.transcribe_files(model, args.audio, batch_size=batching.batch_size, progress=args.verbose,
                                           workers=batching.workers, decoder=decoder)
    for path, text in zip(args.audio, texts):
        print(f"{path}\t{text}", file=out)
    print(f"evaluate_ctc: transcribed {len(texts)} files in {time.perf_counter() - start:.1f} s", file=err)
    if args.stream:
        print(f"evaluate_ctc: streaming: {streaming.describe_report(streaming.streaming_report(model, partials))} "
              f"over {len(partials)} chunks", file=err)
    return 0


if __name__ == "__main__":
    sys.exit(main())
