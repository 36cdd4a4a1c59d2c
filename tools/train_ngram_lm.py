r"""Train an n-gram language model for CTC beam search with KenLM's lmplz (modified Kneser-Ney).

Usage:
  # subword-token LM for NeMo's beam_batch decoder (tokenizer = the ASR model's: a .nemo, or a tokenizer folder):
  python tools/train_ngram_lm.py --unit token --tokenizer samples/checkpoints/whisper_tiny_ctc.nemo --order 6 \
      --out experiments/lm/train_clean_token6.arpa
  # word LM (pyctcdecode-style decoders, KenLM queries):
  python tools/train_ngram_lm.py --unit word --order 3 --out experiments/lm/train_clean_word3.arpa

--text takes a NeMo manifest (.json: each line's "text") or a plain text file (one sentence per line);
the default is the training transcripts (manifests/train-clean.json) -- never the test transcripts.
Writes the ARPA, KenLM's binary (<out>.bin, when build_binary is installed) and <out>.json (unit, order,
n-gram counts, tokenizer). lmplz and build_binary come from `bash tools/setup.sh` (.venv/bin).
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

from duet.foundation.files import add_log_arguments, log_target
from duet.asr.ngram import DEFAULT_ORDER, UNITS, read_training_text, train_ngram_lm
from duet.foundation import REPO_ROOT
from duet.foundation.errors import cli
from duet.foundation.files import library_output_to


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--text", default=str(REPO_ROOT / "manifests" / "train-clean.json"),
                        help="manifest (.json) or text file (default: manifests/train-clean.json)")
    parser.add_argument("--unit", choices=UNITS, default="token", help="LM over ASR tokens or words (default: token)")
    parser.add_argument("--tokenizer", default=None, help="ASR tokenizer folder, or the .nemo model whose tokenizer to use (required for --unit token)")
    parser.add_argument("--order", type=int, default=None,
                        help=f"n-gram order (default: {DEFAULT_ORDER['token']} for token, {DEFAULT_ORDER['word']} for word)")
    parser.add_argument("--out", default=None, help="output ARPA (default: experiments/lm/<text stem>_<unit><order>.arpa)")
    parser.add_argument("--no-binary", action="store_true", help="skip KenLM's binary format")
    add_log_arguments(parser, "train_ngram_lm")
    return parser


@cli
def main(argv: list[str] | None = None) -> int:
    args = get_parser().parse_args(argv)
    order = args.order if args.order is not None else DEFAULT_ORDER[args.unit]
    out = Path(args.out) if args.out else Path("experiments/lm") / f"{Path(args.text).stem}_{args.unit}{order}.arpa"
    start = time.perf_counter()
    try:
        # NeMo's lines (loading a .nemo's tokenizer) go to --log; duet's own (lmplz's time) stay on the console
        with library_output_to(log_target(args)) as (_, err):
            own = logging.StreamHandler(err)
            own.setFormatter(logging.Formatter("%(message)s"))
            logging.getLogger("duet").addHandler(own)
            logging.getLogger("duet").setLevel(logging.INFO)
            sentences = read_training_text(args.text)
            info = train_ngram_lm(sentences, out, order=order, unit=args.unit, tokenizer_dir=args.tokenizer,
                                  text_source=str(args.text), binary=not args.no_binary)
    except RuntimeError as e:  # lmplz/build_binary failed: their last stderr lines are in the message
        print(f"train_ngram_lm: error: {e}", file=sys.stderr)
        return 1
    counts = " ".join(f"{k}-grams={v}" for k, v in info.ngram_counts.items())
    size_kb = out.stat().st_size / 1024
    print(f"wrote {out} ({info.unit} {info.order}-gram, {info.sentences} sentences, {counts}, {size_kb:.0f} KB"
          f"{', binary ' + info.binary if info.binary else ''}) in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
