#!/usr/bin/env python
"""Train a SentencePiece tokenizer for NeMo CTC-BPE models from manifest text.

Usage:
  # default: BPE, 1024 tokens (the report's size), from manifests/train-clean.json
  python tools/train_tokenizer.py
  #   -> tokenizers/spe_bpe_v1024/{tokenizer.model, tokenizer.vocab, vocab.txt}

  python tools/train_tokenizer.py --manifests manifests/train-clean-100.json --vocab-size 256 --type unigram
  #   -> tokenizers/spe_unigram_v256/

Use it in a recipe with model.tokenizer.dir=tokenizers/spe_bpe_v1024 model.tokenizer.type=bpe.
Only train on training text, never on the test split. A vocabulary too large for the text is an
error that names the largest size that fits. A folder already trained with the same settings on the
same text (its source.json records both) is kept unless --force is given; different text retrains it.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from duet.errors import DuetError
from duet.data.tokenizer import (DEFAULT_MANIFESTS, DEFAULT_OUT_ROOT, DEFAULT_TYPE, DEFAULT_VOCAB_SIZE, TOKENIZER_TYPES,
                            is_current, manifest_texts, tokenizer_dir_name, train_tokenizer)
from duet.foundation import python_command
from duet.foundation.errors import cli


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--manifests", nargs="+", type=Path, default=list(DEFAULT_MANIFESTS),
                        help="NeMo manifests whose \"text\" fields are the training text")
    parser.add_argument("--vocab-size", type=int, default=DEFAULT_VOCAB_SIZE,
                        help=f"number of tokens (default: {DEFAULT_VOCAB_SIZE})")
    parser.add_argument("--type", dest="tokenizer_type", choices=TOKENIZER_TYPES, default=DEFAULT_TYPE,
                        help=f"SentencePiece model type (default: {DEFAULT_TYPE})")
    parser.add_argument("--out-root", type=Path, default=DEFAULT_OUT_ROOT,
                        help="the tokenizer goes to <out-root>/spe_<type>_v<size>/")
    parser.add_argument("--force", action="store_true", help="retrain even if the folder is up to date")
    return parser


@cli
def main(argv: list[str] | None = None) -> int:
    args = get_parser().parse_args(argv)
    out_dir = args.out_root / tokenizer_dir_name(args.tokenizer_type, args.vocab_size)
    for path in args.manifests:
        if not path.is_file():
            raise DuetError(f"manifest {path} not found (build it with {python_command('tools/make_manifest.py')})")
    start = time.time()
    try:
        texts = manifest_texts(args.manifests)
        if not args.force and is_current(out_dir, texts, args.vocab_size, args.tokenizer_type):
            print(f"{out_dir} is up to date (same settings, same text), skipped; --force retrains")
            return 0
        train_tokenizer(texts, out_dir, args.vocab_size, args.tokenizer_type)
    except ValueError as e:  # a malformed manifest line (VocabularyTooLarge is a DuetError already)
        raise DuetError(str(e)) from e
    print(f"tokenizer: {args.tokenizer_type}, {args.vocab_size} tokens, from {len(texts)} lines "
          f"in {time.time() - start:.1f} s -> {out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
