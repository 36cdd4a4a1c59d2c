"""Synthesise a LibriSpeech-layout speech corpus with the Debian TTS engines (espeak-ng, flite, festival;
mbrola, RHVoice and pico for the generalisation pool), and the data around it.

Usage:
    # the bundled sample: samples/LibriSpeech/{train,dev,test}-clean (520/60/80 utterances), telephone band
    .venv/bin/python tools/make_sample_corpus.py

    # the same sample without the telephone channel (the base checkpoint's own wideband conditions)
    .venv/bin/python tools/make_sample_corpus.py --channel wideband --out data/sample_wideband/LibriSpeech

    # about 3 hours of training audio for a base checkpoint -> data/synth_3h/LibriSpeech (git-ignored)
    .venv/bin/python tools/make_sample_corpus.py --hours 3

    # the base checkpoint's corpus: every training voice of every engine, templates + WordNet examples
    .venv/bin/python tools/make_sample_corpus.py --hours 5 --pool generalisation   # -> data/general_5h/LibriSpeech

    # the unseen-voices evaluation set (voices no training pool has) and noise for augmentation
    .venv/bin/python tools/make_sample_corpus.py --unseen-voices 200   # -> data/unseen_voices/LibriSpeech
    .venv/bin/python tools/make_sample_corpus.py --noise data/noise

    # a tiny corpus somewhere else
    .venv/bin/python tools/make_sample_corpus.py --out /tmp/tiny --train-utts 4 --dev-utts 1 --test-utts 1

Speakers are engine voices at set rates and pitches (duet/synth/tts.py); the catalogue is a fixed partition
into training-pool, dev and test speakers, so no corpus built here trains on a dev/test speaker.
With --hours, only training-pool speakers are used (dev-clean comes from pool speakers held out of its
train-clean) and the bundled sample's dev/test sentences are excluded (also with another --seed, which
gives fresh sentences: `--hours 4 --seed 1`). Text: duet/synth/corpus_text.py.
The sample is telephone speech (300-3400 Hz, via 8 kHz) and the --hours corpora are wideband, so the
bundled base checkpoint, trained on the latter, meets new conditions in the sample as a pretrained model
meets a user's data (--channel changes either). The same --seed gives the same transcripts and speaker
assignment. The corpus is written to a temporary folder and renamed into place when complete; an
existing corpus at --out is replaced.
"""

import argparse
import os
import sys
from pathlib import Path

from duet import SAMPLES_DIR
from duet.errors import DuetError
from duet.synth.corpus import (HOURS_CHANNEL, SAMPLE_CHANNEL, SAMPLE_COUNTS, SAMPLE_MAX_WORDS, SAMPLE_SEED,
                               build_generalisation,
                               build_hours, build_sample, build_unseen_voices)
from duet.synth.noise import build_noise_set, build_rir_set
from duet.synth.tts import CHANNELS, missing_engines, missing_voice_packages
from duet.foundation import REPO_ROOT
from duet.foundation.errors import cli


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=None,
                        help="corpus folder (default samples/LibriSpeech, or data/synth_<N>h/LibriSpeech with --hours)")
    parser.add_argument("--seed", type=int, default=SAMPLE_SEED, help="seed of the sentences and speaker order")
    parser.add_argument("--train-utts", type=int, default=SAMPLE_COUNTS["train-clean"],
                        help="train-clean utterances of the sample")
    parser.add_argument("--dev-utts", type=int, default=SAMPLE_COUNTS["dev-clean"], help="dev-clean utterances of the sample")
    parser.add_argument("--test-utts", type=int, default=SAMPLE_COUNTS["test-clean"],
                        help="test-clean utterances of the sample")
    parser.add_argument("--hours", type=float, default=None, help="build about N hours of train-clean instead")
    parser.add_argument("--max-words", type=int, default=None,
                        help=f"longest sentence in words (default {SAMPLE_MAX_WORDS} for the sample, none with --hours)")
    parser.add_argument("--channel", choices=sorted(CHANNELS), default=None,
                        help=f"recording channel (default {SAMPLE_CHANNEL} for the sample, "
                             f"{HOURS_CHANNEL} with --hours)")
    parser.add_argument("--pool", choices=("sample", "generalisation"), default="sample",
                        help="with --hours: the sample's training-pool voices and template sentences, or every "
                             "training voice of every Debian engine speaking templates and WordNet examples "
                             "(duet/synth/voices.py; default %(default)s)")
    parser.add_argument("--unseen-voices", type=int, default=None, metavar="N",
                        help="build the unseen-voices evaluation set instead: N held-out WordNet sentences "
                             "spoken by voices no training pool has (default out data/unseen_voices/LibriSpeech)")
    parser.add_argument("--noise", type=Path, default=None, metavar="DIR",
                        help="build the augmentation recordings instead: background noise (sox noises, babble "
                             "of training voices; DIR/noise.json) and room impulse responses (DIR/rir/rir.jsonl.gz)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="parallel synthesis processes")
    return parser


@cli
def main(argv: list[str] | None = None) -> int:
    args = get_parser().parse_args(argv)
    required, optional = missing_engines()
    if required:
        raise DuetError(f"{', '.join(required)} not installed (apt-get install {' '.join(required)})")
    if optional:
        print(f"warning: {', '.join(optional)} not installed; skipping their voices (tools/setup.sh installs them)",
              file=sys.stderr)
    for package in missing_voice_packages():
        print(f"warning: Debian package {package} not installed; skipping its voice (tools/setup.sh installs it)",
              file=sys.stderr)
    counts = {"train-clean": args.train_utts, "dev-clean": args.dev_utts, "test-clean": args.test_utts}
    if args.hours is not None and args.hours <= 0:
        raise DuetError(f"--hours must be positive, got {args.hours}")
    try:
        if args.noise is not None:
            noise, rirs = build_noise_set(args.noise), build_rir_set(args.noise / "rir")
            summary = f"wrote noise recordings ({noise}) and room impulse responses ({rirs})"
        elif args.unseen_voices is not None:
            out = args.out or REPO_ROOT / "data" / "unseen_voices" / "LibriSpeech"
            summary = build_unseen_voices(out, args.unseen_voices, args.jobs, tuple(optional),
                                          channel=args.channel or HOURS_CHANNEL)
        elif args.hours is not None and args.pool == "generalisation":
            out = args.out or REPO_ROOT / "data" / f"general_{args.hours:g}h" / "LibriSpeech"
            summary = build_generalisation(out, args.hours, args.seed, args.jobs, tuple(optional),
                                           channel=args.channel or HOURS_CHANNEL)
        elif args.hours is not None:
            out = args.out or REPO_ROOT / "data" / f"synth_{args.hours:g}h" / "LibriSpeech"
            summary = build_hours(out, args.hours, args.seed, counts, args.jobs, optional, args.max_words,
                                  channel=args.channel or HOURS_CHANNEL)
        else:
            out = args.out or SAMPLES_DIR / "LibriSpeech"
            summary = build_sample(out, args.seed, counts, args.jobs, optional, args.max_words or SAMPLE_MAX_WORDS,
                                   channel=args.channel or SAMPLE_CHANNEL)
    except (RuntimeError, FileExistsError) as e:  # an engine failed, or --out holds something else
        raise DuetError(str(e)) from e
    print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
