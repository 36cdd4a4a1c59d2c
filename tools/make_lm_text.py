#!/usr/bin/env python
r"""Write text for an n-gram LM: the synthetic corpus's own sentences, or everyday English plus transcripts.

Usage:
  python tools/make_lm_text.py                                  # 100,000 sentences -> data/lm_text_100k.txt
  python tools/make_lm_text.py --sentences 20000 --out /tmp/lm.txt
  # then: python tools/train_ngram_lm.py --unit token --tokenizer samples/checkpoints/whisper_tiny_ctc.nemo --text data/lm_text_100k.txt

  # everyday English (WordNet's usage examples) and the transcripts of training manifests, no dev sentence
  python tools/make_lm_text.py --source wordnet --manifest data/speechocean762/train.train.json \
      --exclude data/speechocean762/train.dev.json --out data/lm_text_wordnet.txt

  # both: the corpus's sentences, then WordNet's (the demo's LM text without ../shared/real_speech) ...
  python tools/make_lm_text.py --source corpus wordnet
  # ... and with it: speechocean762/train's transcripts four times, none of its dev speakers' (tools/demo.py)
  python tools/make_lm_text.py --source corpus wordnet --manifest experiments/demo_realtext/train.train.json \
      --manifest-times 4 --exclude experiments/demo_realtext/train.dev.json

--source corpus (default): the embedded default's stand-in for LibriSpeech's LM corpus (book text of the kind
the transcripts come from, without the test books): the templates and word lists of duet/synth/corpus_text.py
with their own seed stream, never a sentence of the sample's dev-clean or test-clean; --sentences of them.
--source wordnet: the ~37,000 usage examples of WordNet 3.0 (Debian wordnet-base) outside its held-out tenth,
as transcripts (duet/synth/wordnet_text.py), for real speech rather than the sample's domain; --sentences does
not apply to them. Both sources may be named: their sentences in that order. Either way --manifest adds the
transcripts of NeMo manifests (training sets only; --manifest-times N writes each one N times, so that a few
thousand transcripts of how people talk weigh against 100,000 generated sentences), and no sentence of an --exclude
manifest (the dev set the LM weights are tuned on) nor of a held-out set of ../shared/real_speech is written.
One lower-case sentence per line, numbers in words; written to a temporary file and renamed into place.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from duet.errors import DuetError
from duet.data.real_speech import held_out_transcripts
from duet.synth.corpus import SAMPLE_SEED, lm_text
from duet.synth.wordnet_text import wordnet_sentences
from duet.text import normalize_spoken, normalize_text
from duet.data.tokenizer import manifest_texts
from duet.foundation import REPO_ROOT
from duet.foundation.errors import cli
from duet.foundation.files import write_text_atomic


SOURCES = ("corpus", "wordnet")


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", nargs="+", choices=SOURCES, default=["corpus"],
                        help="the synthetic corpus's generator (default), WordNet's everyday English, or both")
    parser.add_argument("--manifest", nargs="+", type=Path, default=[], help="add these manifests' transcripts")
    parser.add_argument("--manifest-times", type=int, default=1,
                        help="write each --manifest transcript this many times: weighs a few thousand in-domain "
                             "transcripts against the generated sentences (default 1)")
    parser.add_argument("--exclude", nargs="+", type=Path, default=[],
                        help="manifests none of whose sentences may be written (e.g. the tuning dev set)")
    parser.add_argument("--sentences", type=int, default=100_000,
                        help="how many generated sentences (--source corpus; default 100000)")
    parser.add_argument("--seed", type=int, default=SAMPLE_SEED, help="corpus seed (the sample's by default)")
    parser.add_argument("--out", type=Path, default=None, help="output text file (default data/lm_text_<N>.txt)")
    return parser


@cli
def main(argv: list[str] | None = None) -> int:
    args = get_parser().parse_args(argv)
    if args.sentences < 1:
        raise DuetError(f"--sentences must be positive, got {args.sentences}")
    if args.manifest_times < 1:
        raise DuetError(f"--manifest-times must be positive, got {args.manifest_times}")
    n = args.sentences
    sources = list(dict.fromkeys(args.source))  # each once, in the order given
    named = "_".join("wordnet" if source == "wordnet" else f"{n // 1000}k" if n % 1000 == 0 else str(n)
                     for source in sources)
    out = args.out or REPO_ROOT / "data" / f"lm_text_{named}.txt"
    start = time.time()
    if out.is_dir():
        raise DuetError(f"--out {out} is a folder; give a file name")
    for path in args.manifest + args.exclude:
        if not path.is_file():
            raise DuetError(f"manifest not found: {path}")
    try:
        never = held_out_transcripts() + (manifest_texts(args.exclude) if args.exclude else [])
        added = [normalize_spoken(t) for t in manifest_texts(args.manifest)] if args.manifest else []
    except ValueError as e:  # an empty transcript, named with its file and line
        raise DuetError(str(e)) from None
    generated = [sentence for source in sources
                 for sentence in (wordnet_sentences(held_out=False) if source == "wordnet" else lm_text(n, args.seed))]
    excluded = {normalize_text(t) for t in never}
    texts = [t for t in generated + added * args.manifest_times if normalize_text(t) not in excluded]
    try:
        write_text_atomic(out, "\n".join(texts) + "\n")
    except OSError as e:
        raise DuetError(f"cannot write {out}: {e.strerror}") from e
    words = sum(len(t.split()) for t in texts)
    print(f"make_lm_text: {len(texts)} sentences, {words} words, {len({w for t in texts for w in t.split()})} distinct "
          f"words -> {out} ({time.time() - start:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
