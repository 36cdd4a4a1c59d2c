#!/usr/bin/env python
r"""WER without and with the pipeline's silence trimming (--trim-silence), by Silero VAD and by the energy threshold
it replaced, on recordings as they are and with silence added around them, as a microphone gives it.

Usage:
  python bench/silence_ab.py                                   # bundled base checkpoint, the sample's test-clean
  python bench/silence_ab.py --model experiments/demo_asr/demo_asr.nemo --manifest data/so/test.json --limit 150
  python bench/silence_ab.py --real-set speechocean762/test --limit 150    # a set of ../shared/real_speech
  python bench/silence_ab.py --real-set read_sentences --limit 141

Each utterance of --manifest or --real-set (default: the sample's test-clean; the first --limit after a fixed
shuffle) is transcribed greedily as recorded, with --before/--after seconds of faint noise (-60 dBFS) added around
it, and with as much room noise (``duet.synth.conversation.room_noise``: fan, hum, key clicks; --room-dbfs) added around
it, each three ways: whole; trimmed by the energy threshold (``duet.vad.energy_speech_bounds``: within 35 dB of the
peak, the pipeline's trimming before the VAD); trimmed by Silero VAD (``duet.pipeline.speech_bounds``, what
--trim-silence does now); both from --margin seconds before the first sound or speech to --margin after the last.
One table of WER, and how many utterances VAD trimming made worse or better than the whole recording (with a
sign test's p: small means the difference is more than chance); scored as every WER of the project
(``duet.asr.scoring.score``: the words of ``duet.text.normalize_text``).
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from pathlib import Path

import numpy as np

from duet import SAMPLES_DIR
from duet.asr.inference import load_asr_model, load_audio, transcribe_audio
from duet.asr.scoring import score
from duet.errors import DuetError
from duet.data.manifest import build_split_manifest, read_manifest
from duet.pipeline import speech_bounds
from duet.data.real_speech import DEFAULT_ROOT, set_dir
from duet.synth.conversation import room_noise
from duet.vad import energy_speech_bounds
from duet.foundation.errors import cli

DEFAULT_MODEL = SAMPLES_DIR / "checkpoints" / "fastconformer_tiny_base.nemo"
NOISE_DBFS = -60.0


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL, help="NeMo .nemo file (default: bundled base)")
    parser.add_argument("--manifest", type=Path, default=None,
                        help="NeMo manifest (default: the bundled sample's test-clean)")
    parser.add_argument("--real-set", default=None, metavar="SET",
                        help=f"a set of the real-speech folder ({DEFAULT_ROOT}), e.g. speechocean762/test")
    parser.add_argument("--limit", type=int, default=80, help="utterances to score (default: 80)")
    parser.add_argument("--margin", type=float, default=0.5,
                        help="--trim-silence's seconds (default: 0.5, chosen on the speechocean762/train dev speakers)")
    parser.add_argument("--before", type=float, default=0.5, help="seconds of noise added before (default: 0.5)")
    parser.add_argument("--after", type=float, default=1.0, help="seconds of noise added after (default: 1.0)")
    parser.add_argument("--room-dbfs", type=float, default=-45.0, help="level of the room noise (default: -45)")
    return parser


@cli
def main(argv: list[str] | None = None) -> int:
    args = get_parser().parse_args(argv)
    if not args.model.is_file():
        raise DuetError(f"--model {args.model} does not exist")
    if args.manifest and args.real_set:
        raise DuetError("--manifest and --real-set: give one of them")
    if args.manifest:
        entries, source = read_manifest(args.manifest), str(args.manifest)
    elif args.real_set:
        entries, source = build_split_manifest(set_dir(DEFAULT_ROOT, args.real_set)).entries, args.real_set
    else:
        entries, source = build_split_manifest(SAMPLES_DIR / "LibriSpeech" / "test-clean").entries, \
            "the sample test-clean"
    entries = list(entries)
    random.Random(0).shuffle(entries)
    entries = entries[: args.limit]
    model = load_asr_model(args.model)
    rate = int(model.cfg.sample_rate)
    rng = np.random.default_rng(0)

    def noise(seconds: float) -> np.ndarray:
        return (rng.standard_normal(int(seconds * rate)) * 10 ** (NOISE_DBFS / 20)).astype(np.float32)

    def trimmed(audios: list[np.ndarray], bounds) -> list[np.ndarray]:
        return [audio[slice(*bounds(audio, rate, args.margin))] for audio in audios]

    clips = [load_audio(e["audio_filepath"], rate) for e in entries]
    padded = [np.concatenate([noise(args.before), clip, noise(args.after)]) for clip in clips]
    roomy = [np.concatenate([room_noise(args.before, rate, 2 * i, args.room_dbfs), clip,
                             room_noise(args.after, rate, 2 * i + 1, args.room_dbfs)]) for i, clip in enumerate(clips)]
    ids, refs = [str(i) for i in range(len(entries))], [e["text"] for e in entries]
    durations = [len(clip) / rate for clip in clips]
    print(f"{args.model.name}, {len(entries)} utterances of {source}; trim margin {args.margin:g} s; "
          f"added {args.before:g} s + {args.after:g} s at {NOISE_DBFS:g} dBFS, or of room noise at {args.room_dbfs:g} dBFS\n")
    print("| audio | WER whole | WER energy-trimmed | WER VAD-trimmed | VAD vs whole: utterances worse / better "
          "(sign test p) |\n|---|---:|---:|---:|---|")
    for name, audios in (("as recorded", clips), ("with silence added", padded), ("with room noise added", roomy)):
        scored = [score(ids, refs, transcribe_audio(model, batch), durations)
                  for batch in (audios, trimmed(audios, energy_speech_bounds), trimmed(audios, speech_bounds))]
        wers = [100 * s.summary["wer"] for s in scored]
        # one reference per utterance in both: its WER orders the two transcripts as its error count does
        pairs = [(whole["wer"], vad["wer"]) for whole, vad in zip(scored[0].records, scored[2].records)
                 if whole["wer"] is not None]
        worse, better = sum(v > w for w, v in pairs), sum(v < w for w, v in pairs)
        print(f"| {name} | " + " | ".join(f"{w:.2f} %" for w in wers) +
              f" | {worse} / {better} (p {sign_test_p(worse, better):.2f}) |")
    return 0


def sign_test_p(worse: int, better: int) -> float:
    """Two-sided sign test: how likely a split at least this uneven is if trimming changed nothing but chance
    (ties, utterances with as many errors either way, left out)."""
    n = worse + better
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(worse, better) + 1)) / 2 ** n
    return min(1.0, 2 * tail)


if __name__ == "__main__":
    sys.exit(main())
