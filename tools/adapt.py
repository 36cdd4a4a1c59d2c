#!/usr/bin/env python
r"""Adapt the speech recogniser to your own recordings: a folder of audio in, a model that hears you better out.

Usage:
  # your recordings, no transcripts: Whisper tiny.en labels them, a quarter is held out to choose and check the model
  python tools/adapt.py my_recordings/ --out experiments/mine
  #   -> experiments/mine/model.nemo + decoding.json (the base's), metrics.json, settings.json, adapt.log, manifests

  # then use it like any model
  python tools/pipeline.py --asr-model experiments/mine/model.nemo my_question.wav

  # recordings with transcripts: give a NeMo manifest instead of the folder
  python tools/adapt.py data/mine/manifest.json --out experiments/mine

  # also score a general set before and after (what else moved); replay 30 % of real speech the base trained on
  # (e.g. speechocean762/train outside your speakers: it kept other speakers level in the bench)
  python tools/adapt.py my_recordings/ --out experiments/mine --general manifests/dev-clean.json \
      --replay data/speechocean762/train.train.json --replay-share 0.3

The base (default: the bundled samples/checkpoints/whisper_tiny_ctc.nemo) is fine-tuned on the rest of your
utterances with the recipe bench/adaptation_ab.py chose (RESULTS.md, "Adapting to one speaker"): the options below
default to it. The held-out part is validated every --validate-every steps; the best step is kept and the run stops
after --patience validations without a better one. A model worse than the base on your held-out part is never handed
back: then model.nemo is the base. The last line says the held-out WER before -> after (greedy); the held-out part
also chose the step, so that figure flatters the adapted model a little. These lines are also in <out>/adapt.log;
NeMo's, Lightning's and Whisper's log lines go to --log (experiments/logs/adapt.log), or with --verbose to standard
error.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from duet.asr.adaptation import BASE_MODEL, MOVING, AdaptationSettings, adapt, summary_line
from duet.asr.pseudo_labelling import DEFAULT_MIN_CONFIDENCE, WHISPER_TEACHER
from duet.foundation.errors import cli
from duet.foundation.files import add_log_arguments, library_output_to, log_target

DEFAULTS = AdaptationSettings(source=Path("."), out=Path("."))


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", type=Path, help="a folder (or file) of audio, or a .json NeMo manifest with transcripts")
    parser.add_argument("--out", type=Path, required=True, help="the run folder to write")
    parser.add_argument("--base", type=Path, default=BASE_MODEL, help="the .nemo to adapt (default: the bundled base)")
    parser.add_argument("--held-out-share", type=float, default=DEFAULTS.held_out_share,
                        help=f"share of your utterances held out (default {DEFAULTS.held_out_share})")
    parser.add_argument("--moving", choices=MOVING, default=DEFAULTS.moving,
                        help=f"what trains: the CTC head, the block on Whisper's encoder + head, also Whisper's last "
                             f"layer, or all (default {DEFAULTS.moving})")
    parser.add_argument("--lr", type=float, default=DEFAULTS.lr, help=f"learning rate (default {DEFAULTS.lr:g})")
    parser.add_argument("--encoder-lr-scale", type=float, default=DEFAULTS.encoder_lr_scale,
                        help=f"--moving all: Whisper's weights at this share of --lr (default {DEFAULTS.encoder_lr_scale})")
    parser.add_argument("--max-steps", type=int, default=DEFAULTS.max_steps, help=f"default {DEFAULTS.max_steps}")
    parser.add_argument("--validate-every", type=int, default=DEFAULTS.validate_every, metavar="STEPS",
                        help=f"default {DEFAULTS.validate_every}")
    parser.add_argument("--patience", type=int, default=DEFAULTS.patience,
                        help=f"validations without improvement before stopping (default {DEFAULTS.patience})")
    parser.add_argument("--batch-size", type=int, default=DEFAULTS.batch_size, help=f"default {DEFAULTS.batch_size}")
    parser.add_argument("--replay", type=Path,
                        help="a manifest of other speech mixed into training (default with --replay-share: the bundled "
                             "sample's train-clean)")
    parser.add_argument("--replay-share", type=float, default=DEFAULTS.replay_share,
                        help=f"share of the training utterances drawn from --replay (default {DEFAULTS.replay_share})")
    parser.add_argument("--general", type=Path, help="a manifest scored before and after (what else moved)")
    parser.add_argument("--teacher", default=WHISPER_TEACHER, help=f"pseudo-labeller: {WHISPER_TEACHER!r} or a .nemo")
    parser.add_argument("--min-confidence", type=float, default=DEFAULT_MIN_CONFIDENCE,
                        help=f"pseudo-labels kept from this confidence (default {DEFAULT_MIN_CONFIDENCE})")
    parser.add_argument("--seed", type=int, default=DEFAULTS.seed, help="the carve's and training's seed")
    parser.add_argument("--threads", type=int, default=DEFAULTS.threads, help=f"CPU threads (default {DEFAULTS.threads})")
    add_log_arguments(parser, "adapt")
    return parser


@cli
def main(argv: list[str] | None = None) -> int:
    args = get_parser().parse_args(argv)
    settings = AdaptationSettings(
        source=args.source, out=args.out, base=args.base, held_out_share=args.held_out_share, seed=args.seed,
        moving=args.moving, lr=args.lr, encoder_lr_scale=args.encoder_lr_scale, max_steps=args.max_steps,
        validate_every=args.validate_every, patience=args.patience, batch_size=args.batch_size, replay=args.replay,
        replay_share=args.replay_share, general=args.general, teacher=args.teacher,
        min_confidence=args.min_confidence, threads=args.threads)
    settings.validate()  # before the run folder exists: a bad option leaves nothing behind
    args.out.mkdir(parents=True, exist_ok=True)
    with open(args.out / "adapt.log", "w", encoding="utf-8") as log, \
            library_output_to(log_target(args)) as (console, _):
        def say(line: str) -> None:
            print(line, file=console, flush=True)
            log.write(line + "\n")
            log.flush()

        say(summary_line(adapt(settings, say)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
