#!/usr/bin/env python
r"""Write general English for a language model to keep reading while it is fine-tuned (slm's data.replay_text).

Usage:
    python tools/make_english_text.py                            # -> data/english_estimate.txt
    python slm/finetune.py --config-name slm_whisper_offline     # its preset replays that file
    python slm/finetune.py --config-name slm_gpt2_alpaca data.replay_text=data/english_estimate.txt \
        data.replay_per_row=0.25

    # Alpaca-format rows about everyday words (definitions, usage) for slm's data.extra_train
    python tools/make_english_text.py --instructions 1000        # -> data/wordnet_instructions.json

The sentences are WordNet 3.0's usage examples as written, case and punctuation kept (Debian wordnet-base,
WordNet licence), one per line: only the "estimate" part of duet.english_text, never its "dev" or "test" tenths,
so bench/slm_english_perplexity.py still scores a model on English it has not read. (tools/make_lm_text.py
--source wordnet writes the same examples as lower-case transcripts for the speech LM, with another held-out
tenth: not for this.) With --instructions, rows of duet.synth.wordnet_instructions instead, none of them holding
a word of the open requests that bench/slm_open_requests.py asks (samples/open_requests.json). Written to a
temporary file and renamed into place.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from duet.english_text import wordnet_examples
from duet.errors import DuetError
from duet.foundation import REPO_ROOT
from duet.foundation.errors import cli
from duet.foundation.files import write_text_atomic
from duet.synth.wordnet_instructions import request_words, wordnet_instructions

def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path,
                        help="output file (default data/english_estimate.txt, or data/wordnet_instructions.json)")
    parser.add_argument("--sentences", type=int, default=None,
                        help="at most this many, spread over the part (default: all of it)")
    parser.add_argument("--instructions", type=int, metavar="ROWS",
                        help="write this many Alpaca-format instruction rows instead of sentences")
    parser.add_argument("--seed", type=int, default=0, help="which rows --instructions draws (default 0)")
    return parser


@cli
def main(argv: list[str] | None = None) -> int:
    args = get_parser().parse_args(argv)
    if args.sentences is not None and args.sentences < 1 or args.instructions is not None and args.instructions < 1:
        raise DuetError(f"--sentences and --instructions must be positive, got {args.sentences}, {args.instructions}")
    out = args.out or REPO_ROOT / "data" / ("wordnet_instructions.json" if args.instructions else "english_estimate.txt")
    if out.is_dir():
        raise DuetError(f"--out {out} is a folder; give a file name")
    if args.instructions:
        from slm.metrics import load_open_requests  # the requests' one home (it loads torch: only this branch pays)

        rows = wordnet_instructions(args.instructions, args.seed, exclude=request_words(load_open_requests()))
        text, what = json.dumps(rows, indent=1, ensure_ascii=False) + "\n", f"{len(rows)} instruction rows from WordNet"
    else:
        sentences = wordnet_examples("estimate", limit=args.sentences)
        text, what = "\n".join(sentences) + "\n", f"{len(sentences)} sentences of WordNet's estimate part"
    try:
        write_text_atomic(out, text)
    except OSError as e:
        raise DuetError(f"cannot write {out}: {e.strerror}") from e
    print(f"make_english_text: {what} -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
