"""Transcribe a NeMo manifest (or audio files) with a CTC .nemo model and report WER/CER.

Usage:
  # score a manifest: per-utterance JSONL + summary JSON, worst/best table printed
  python nemo_recipes/evaluate_ctc.py --model experiments/fastconformer_small/fastconformer_small.nemo \
      --manifest manifests/test-clean.json --out-dir results/test-clean

  # CPU speed-up: dynamic int8 quantisation of the Linear layers (report the WER change it causes)
  python nemo_recipes/evaluate_ctc.py --model base.nemo --manifest manifests/test-clean.json --int8

  # plain transcription of files (no references): one "path<TAB>text" line each
  python nemo_recipes/evaluate_ctc.py --model base.nemo --audio a.flac b.wav

Files are decoded in duration-sorted batches under torch.inference_mode; text is lower-cased and
stripped of punctuation (except apostrophes) on both sides before jiwer counts errors.
Outputs (with --manifest): <out-dir>/<prefix>_utterances.jsonl (id, ref, hyp, wer) and
<out-dir>/<prefix>_summary.json (wer, cer, substitutions, deletions, insertions, rtfx).
"""

import argparse
import json
import sys
import time
from pathlib import Path

from duet.asr import evaluate


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, type=Path, help="a .nemo checkpoint")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--manifest", type=Path, help="NeMo manifest with audio_filepath, duration, text")
    source.add_argument("--audio", nargs="+", type=Path, help="audio files to transcribe (no scoring)")
    parser.add_argument("--out-dir", type=Path, default=None, help="where results go (default: beside the manifest's name under results/)")
    parser.add_argument("--prefix", default="eval", help="output file prefix (default: eval)")
    parser.add_argument("--batch-size", type=int, default=32, help="utterances per batch (default: 32)")
    parser.add_argument("--int8", action="store_true", help="dynamic int8 quantisation of Linear layers (CPU)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default=None, help="default: cuda if available")
    parser.add_argument("--show", type=int, default=5, help="worst/best utterances to print (default: 5)")
    return parser


def main(argv=None) -> int:
    args = get_parser().parse_args(argv)
    try:
        model = evaluate.load_asr_model(args.model, device="cpu" if args.int8 else args.device)
        if args.int8:
            evaluate.quantize_linear_int8(model)
        if args.audio:
            start = time.perf_counter()
            texts = evaluate.transcribe_files(model, args.audio, batch_size=args.batch_size, progress=True)
            for path, text in zip(args.audio, texts):
                print(f"{path}\t{text}")
            print(f"evaluate_ctc: transcribed {len(texts)} files in {time.perf_counter() - start:.1f} s", file=sys.stderr)
            return 0
        scored = evaluate.evaluate_manifest(model, args.manifest, batch_size=args.batch_size)
    except evaluate.AsrInputError as e:
        print(f"evaluate_ctc: error: {e}", file=sys.stderr)
        return 2
    scored.summary.update(model=str(args.model), int8=args.int8)
    out_dir = args.out_dir or Path("results") / args.manifest.stem
    utt_path, summary_path = evaluate.write_results(scored, out_dir, args.prefix)
    print(evaluate.format_examples(scored.records, args.show))
    s = scored.summary
    print(json.dumps(s, indent=2))
    print(
        f"evaluate_ctc: WER {100 * s['wer']:.2f}% CER {100 * s['cer']:.2f}% "
        f"(S {s['substitutions']} D {s['deletions']} I {s['insertions']} / {s['reference_words']} words) "
        f"on {s['utterances']} utterances, RTFx {s['rtfx']}; wrote {utt_path} and {summary_path}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
