#!/usr/bin/env python
r"""WER with and without the pipeline's silence trimming (--trim-silence), on recordings as they are and with
silence added around them, as a microphone gives it.

Usage:
  python bench/silence_ab.py                                   # bundled base checkpoint, the sample's test-clean
  python bench/silence_ab.py --model experiments/demo_asr/demo_asr.nemo --manifest data/so/test.json --limit 150

Each utterance of --manifest (the first --limit after a fixed shuffle) is transcribed greedily four ways: as
recorded; trimmed by ``duet.pipeline.speech_bounds`` (from --margin seconds before the first sound to --margin after
the last); with --before/--after seconds of faint noise (-60 dBFS) added around it; and added then trimmed. One
table of WER per way; the words of a reference are those of ``duet.text.normalize_text``.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

import jiwer
import numpy as np

from duet import SAMPLES_DIR
from duet.asr.inference import load_asr_model, load_audio, transcribe_audio
from duet.errors import DuetError, cli
from duet.manifest import build_split_manifest, read_manifest
from duet.pipeline import speech_bounds
from duet.text import normalize_text

DEFAULT_MODEL = SAMPLES_DIR / "checkpoints" / "fastconformer_tiny_base.nemo"
NOISE_DBFS = -60.0


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL, help="NeMo .nemo file (default: bundled base)")
    parser.add_argument("--manifest", type=Path, default=None,
                        help="NeMo manifest (default: the bundled sample's test-clean)")
    parser.add_argument("--limit", type=int, default=80, help="utterances to score (default: 80)")
    parser.add_argument("--margin", type=float, default=0.2, help="--trim-silence's seconds (default: 0.2)")
    parser.add_argument("--before", type=float, default=0.5, help="seconds of noise added before (default: 0.5)")
    parser.add_argument("--after", type=float, default=1.0, help="seconds of noise added after (default: 1.0)")
    return parser


@cli
def main(argv: list[str] | None = None) -> int:
    args = get_parser().parse_args(argv)
    if not args.model.is_file():
        raise DuetError(f"--model {args.model} does not exist")
    entries = (read_manifest(args.manifest) if args.manifest
               else build_split_manifest(SAMPLES_DIR / "LibriSpeech" / "test-clean").entries)
    entries = list(entries)
    random.Random(0).shuffle(entries)
    entries = entries[: args.limit]
    model = load_asr_model(args.model)
    rate = int(model.cfg.sample_rate)
    rng = np.random.default_rng(0)

    def noise(seconds: float) -> np.ndarray:
        return (rng.standard_normal(int(seconds * rate)) * 10 ** (NOISE_DBFS / 20)).astype(np.float32)

    def trim(audio: np.ndarray) -> np.ndarray:
        first, last = speech_bounds(audio, rate, args.margin)
        return audio[first:last]

    clips = [load_audio(e["audio_filepath"], rate) for e in entries]
    padded = [np.concatenate([noise(args.before), clip, noise(args.after)]) for clip in clips]
    refs = [normalize_text(e["text"]) for e in entries]
    print(f"{args.model.name}, {len(entries)} utterances of {args.manifest or 'the sample test-clean'}; "
          f"trim margin {args.margin:g} s; added {args.before:g} s + {args.after:g} s at {NOISE_DBFS:g} dBFS\n")
    print("| audio | WER as given | WER trimmed |\n|---|---:|---:|")
    for name, audios in (("as recorded", clips), ("with silence added", padded)):
        wers = []
        for batch in (audios, [trim(a) for a in audios]):
            hyps = [normalize_text(t) for t in transcribe_audio(model, batch, batch_size=16)]
            wers.append(100 * jiwer.wer(refs, hyps))
        print(f"| {name} | {wers[0]:.2f} % | {wers[1]:.2f} % |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
