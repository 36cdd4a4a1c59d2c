#!/usr/bin/env python
r"""Write general English for a language model to keep reading while it is fine-tuned (slm's data.replay_text).

Usage:
    python tools/make_english_text.py                            # -> data/english_estimate.txt
    python slm/finetune.py --config-name slm_whisper_offline     # its preset replays that file
    python slm/finetune.py --config-name slm_gpt2_alpaca data.replay_text=data/english_estimate.txt \
        data.replay_per_row=0.25

The sentences are WordNet 3.0's usage examples as written, case and punctuation kept (Debian wordnet-base,
WordNet licence), one per line: only the "estimate" part of duet.data.english_text, never its "dev" or "test" tenths,
so bench/slm_english_perplexity.py still scores a model on English it has not read. (tools/make_lm_text.py
--source wordnet writes the same examples as lower-case transcripts for the speech LM, with another held-out
tenth: not for this.) Written to a temporary file and renamed into place.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from duet.data.english_text import wordnet_examples
from duet.errors import DuetError
from duet.foundation import REPO_ROOT
from duet.foundation.errors import cli
from duet.foundation.files import write_text_atomic


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "data" / "english_estimate.txt",
                        help="output text file (default data/english_estimate.txt)")
    parser.add_argument("--sentences", type=int, default=None,
                        help="at most this many, spread over the part (default: all of it)")
    return parser


@cli
def main(argv: list[str] | None = None) -> int:
    args = get_parser().parse_args(argv)
    if args.sentences is not None and args.sentences < 1:
        raise DuetError(f"--sentences must be positive, got {args.sentences}")
    if args.out.is_dir():
        raise DuetError(f"--out {args.out} is a folder; give a file name")
    sentences = wordnet_examples("estimate", limit=args.sentences)
    try:
        write_text_atomic(args.out, "\n".join(sentences) + "\n")
    except OSError as e:
        raise DuetError(f"cannot write {args.out}: {e.strerror}") from e
    print(f"make_english_text: {len(sentences)} sentences of WordNet's estimate part -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
