#!/usr/bin/env python
"""Write in-domain text for an n-gram LM: sentences from the synthetic corpus's own text generator.

Usage:
  python tools/make_lm_text.py                                  # 100,000 sentences -> data/lm_text_100k.txt
  python tools/make_lm_text.py --sentences 20000 --out /tmp/lm.txt
  # then: python tools/train_ngram_lm.py --unit token --tokenizer samples/checkpoints/whisper_tiny_ctc.nemo --text data/lm_text_100k.txt

The embedded default's stand-in for LibriSpeech's LM corpus (book text of the kind the transcripts come
from, without the test books): the templates and word lists of duet/synth/corpus_text.py with their own seed
stream, never a sentence of the sample's dev-clean or test-clean. One lower-case sentence per line,
numbers in words; written to a temporary file and renamed into place.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from duet.errors import DuetError
from duet.synth.corpus import SAMPLE_SEED, lm_text
from duet.foundation import REPO_ROOT
from duet.foundation.errors import cli
from duet.foundation.files import write_text_atomic


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sentences", type=int, default=100_000, help="how many sentences (default 100000)")
    parser.add_argument("--seed", type=int, default=SAMPLE_SEED, help="corpus seed (the sample's by default)")
    parser.add_argument("--out", type=Path, default=None, help="output text file (default data/lm_text_<N>.txt)")
    return parser


@cli
def main(argv: list[str] | None = None) -> int:
    args = get_parser().parse_args(argv)
    if args.sentences < 1:
        raise DuetError(f"--sentences must be positive, got {args.sentences}")
    n = args.sentences
    out = args.out or REPO_ROOT / "data" / (f"lm_text_{n // 1000}k.txt" if n % 1000 == 0 else f"lm_text_{n}.txt")
    start = time.time()
    if out.is_dir():
        raise DuetError(f"--out {out} is a folder; give a file name")
    texts = lm_text(n, args.seed)
    try:
        write_text_atomic(out, "\n".join(texts) + "\n")
    except OSError as e:
        raise DuetError(f"cannot write {out}: {e.strerror}") from e
    words = sum(len(t.split()) for t in texts)
    print(f"make_lm_text: {n} sentences, {words} words, {len({w for t in texts for w in t.split()})} distinct "
          f"words -> {out} ({time.time() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
