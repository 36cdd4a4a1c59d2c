#!/usr/bin/env python
r"""How close word timestamps come to where the words are: our CTC model against faster-whisper tiny.en.

Usage:
  python bench/word_times.py                                   # the bundled Whisper base, 40 utterances
  python bench/word_times.py --model experiments/demo_asr/demo_asr.nemo --utterances 80
  python bench/word_times.py --model M.nemo --no-whisper       # ours alone

No recording here comes with word boundaries, so the bench makes utterances whose boundaries are known exactly:
each word of a sentence is synthesised on its own (duet.synth.tts.synthesize, silence trimmed at -50 dB) and the
words are joined with pauses of --min-pause to --max-pause seconds. Sentences are WordNet's held-out tenth (the
unseen-voices set's text: no training corpus holds them), voices the held-out identities of that set (none is in
any training pool). Words spoken one by one are in citation form, not running speech: these figures are about
timing, on speech easier to cut than a conversation.

Both systems read the same files:
  ours      the .nemo's greedy transcript with word times (duet.asr.words: NeMo's CTC timestamps); with
            --pipeline-decoding its decoding.json's (beam search, joint decoding: the chosen text force-aligned)
  whisper   faster-whisper tiny.en, int8, greedy, word_timestamps=True (its cross-attention alignment)
Hypothesis words are matched to reference words by difflib over the normalised word sequences; only words
spelt right are timed. For each system: the share of reference words matched, the median absolute error of word
starts and ends, their mean signed error (negative: early), the share within 0.1 s and 0.25 s, and the share of
matched words whose middle lies inside the spoken word. Writes <out>/word_times.json. NeMo's log lines go to --log
(experiments/logs/word_times.log) unless --verbose shows them.
"""

from __future__ import annotations

import argparse
import difflib
import functools
import json
import random
import shutil
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import numpy as np
import soundfile as sf
import torch
from faster_whisper import WhisperModel

from duet import SAMPLES_DIR
from duet.asr.inference import load_asr_model, transcribe_files_with_words
from duet.asr.whisper_weights import whisper_tiny_en
from duet.asr.decoding import CtcDecoder, build_decoder, greedy_decoder
from duet.asr.decoding.file import decoding_file_for, read_decoding_file
from duet.foundation.files import add_log_arguments, log_target
from duet.errors import DuetError
from duet.foundation import EXPERIMENTS
from duet.foundation.errors import cli
from duet.foundation.files import library_output_to, write_text_atomic
from duet.synth.tts import PAD_SECONDS, SAMPLE_RATE, synthesize, usable
from duet.synth.voices import unseen_speakers
from duet.synth.wordnet_text import wordnet_sentences
from duet.text import normalize_text

DEFAULT_MODEL = SAMPLES_DIR / "checkpoints" / "whisper_tiny_ctc.nemo"
EDGE_SECONDS = 0.3  # silence before the first word and after the last
WITHIN = (0.1, 0.25)  # s: the tolerances reported
MAX_SECONDS = 30  # Whisper's window (and the Whisper base's longest input)


@dataclass(frozen=True)
class TimedWord:
    word: str
    start: float
    end: float


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL, help="our .nemo (default: the bundled Whisper base)")
    parser.add_argument("--utterances", type=int, default=40, help="utterances to build (default 40)")
    parser.add_argument("--min-words", type=int, default=4, help="shortest sentence in words (default 4)")
    parser.add_argument("--max-words", type=int, default=12, help="longest sentence in words (default 12)")
    parser.add_argument("--min-pause", type=float, default=0.05, help="shortest pause between words, s (default 0.05)")
    parser.add_argument("--max-pause", type=float, default=0.5, help="longest pause between words, s (default 0.5)")
    parser.add_argument("--seed", type=int, default=0, help="which sentences, and the pauses (default 0)")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads for both systems (default 2)")
    parser.add_argument("--no-whisper", action="store_true", help="time ours only")
    parser.add_argument("--pipeline-decoding", action="store_true",
                        help="ours decodes as the model's decoding.json says (as tools/pipeline.py does), not greedily")
    parser.add_argument("--out", type=Path, default=EXPERIMENTS / "bench" / "word_times", help="output folder")
    add_log_arguments(parser, "word_times")
    return parser


def build_utterances(out: Path, count: int, min_words: int, max_words: int, min_pause: float, max_pause: float,
                     seed: int, progress: TextIO = sys.stderr) -> list[tuple[Path, list[TimedWord]]]:
    """``count`` WAV files of words synthesised one by one and joined by pauses, with each word's true span; the
    voices of the unseen-voices set take turns, the sentences and pauses are drawn with ``seed``. A line on
    ``progress`` counts them."""
    speakers = [s for s in unseen_speakers() if usable(s)]
    if not speakers:
        raise DuetError("no held-out TTS voice is installed (tools/setup.sh installs them)")
    rng = random.Random(seed)
    sentences = [s for s in wordnet_sentences(held_out=True) if min_words <= len(s.split()) <= max_words]
    if len(sentences) < count:
        raise DuetError(f"only {len(sentences)} held-out sentences have {min_words}-{max_words} words; "
                        f"asked for {count} utterances")
    rng.shuffle(sentences)
    pad, edge = round(PAD_SECONDS * SAMPLE_RATE), np.zeros(round(EDGE_SECONDS * SAMPLE_RATE), np.float32)
    utterances = []
    with tempfile.TemporaryDirectory(prefix="duet_word_times_") as tmp:
        for index, sentence in enumerate(sentences[:count]):
            speaker = speakers[index % len(speakers)]
            pieces, words, cursor = [edge], [], len(edge)  # cursor in samples: no rounding adds up
            for position, word in enumerate(sentence.split()):
                clip = Path(tmp) / f"{index}_{position}.flac"
                synthesize(speaker, word, clip, min_seconds=0.0)
                audio, _ = sf.read(clip, dtype="float32")
                # synthesize trims the word at -50 dB and pads it with digital silence: cut exactly that
                if audio[:pad].any() or audio[len(audio) - pad:].any():
                    raise RuntimeError(f"{clip.name}: speech inside synthesize's padding ({speaker.describe()})")
                audio = audio[pad: len(audio) - pad]
                if position:
                    pieces.append(np.zeros(round(rng.uniform(min_pause, max_pause) * SAMPLE_RATE), np.float32))
                    cursor += len(pieces[-1])
                pieces.append(audio)
                words.append(TimedWord(word, round(cursor / SAMPLE_RATE, 3), round((cursor + len(audio)) / SAMPLE_RATE, 3)))
                cursor += len(audio)
            pieces.append(edge)
            if cursor + len(edge) > MAX_SECONDS * SAMPLE_RATE:
                raise DuetError(f"utterance {index} is {(cursor + len(edge)) / SAMPLE_RATE:.1f} s long, over Whisper's "
                                f"{MAX_SECONDS} s: lower --max-words or --max-pause")
            path = out / f"utt{index:03d}.wav"
            sf.write(path, np.concatenate(pieces), SAMPLE_RATE)
            utterances.append((path, words))
            print(f"\rbuilt {index + 1}/{count} utterances", end="", file=progress, flush=True)
    print(file=progress)
    return utterances


def split_normalised(words: list[TimedWord]) -> list[TimedWord]:
    """Each word as the normalised words it scores as (a hyphenated word is several; punctuation alone, none)."""
    return [TimedWord(w, t.start, t.end) for t in words for w in normalize_text(t.word).split()]


def timing_errors(reference: list[TimedWord], hypothesis: list[TimedWord]) -> list[tuple[TimedWord, TimedWord]]:
    """(reference, hypothesis) pairs of the words both spell the same, matched in order."""
    reference, hypothesis = split_normalised(reference), split_normalised(hypothesis)
    matcher = difflib.SequenceMatcher(a=[w.word for w in reference], b=[w.word for w in hypothesis], autojunk=False)
    return [(reference[block.a + i], hypothesis[block.b + i])
            for block in matcher.get_matching_blocks() for i in range(block.size)]


def summarise(pairs: list[tuple[TimedWord, TimedWord]], reference_words: int) -> dict:
    if not pairs:
        return {"matched": 0, "reference_words": reference_words}
    starts = [h.start - r.start for r, h in pairs]
    ends = [h.end - r.end for r, h in pairs]
    inside = [r.start <= (h.start + h.end) / 2 <= r.end for r, h in pairs]
    summary = {"matched": len(pairs), "reference_words": reference_words,
               "start_median_abs_s": round(statistics.median(map(abs, starts)), 3),
               "end_median_abs_s": round(statistics.median(map(abs, ends)), 3),
               "start_mean_s": round(statistics.fmean(starts), 3), "end_mean_s": round(statistics.fmean(ends), 3),
               "middle_inside": round(sum(inside) / len(pairs), 3)}
    for tolerance in WITHIN:
        summary[f"start_within_{tolerance}"] = round(sum(abs(e) <= tolerance for e in starts) / len(pairs), 3)
        summary[f"end_within_{tolerance}"] = round(sum(abs(e) <= tolerance for e in ends) / len(pairs), 3)
    return summary


def ours(model, decoder: CtcDecoder, paths: list[Path]) -> list[list[TimedWord]]:
    return [[TimedWord(w.word, w.start, w.end) for w in timed.words or []]
            for timed in transcribe_files_with_words(model, paths, decoder=decoder)]


def whisper(model: WhisperModel, paths: list[Path]) -> list[list[TimedWord]]:
    results = []
    for path in paths:
        segments, _ = model.transcribe(str(path), language="en", beam_size=1, temperature=0.0, word_timestamps=True,
                                       condition_on_previous_text=False, vad_filter=False)
        results.append([TimedWord(w.word, w.start, w.end) for s in segments for w in s.words or []])
    return results


def report(name: str, summary: dict) -> str:
    if not summary["matched"]:
        return f"{name:8s} no word matched of {summary['reference_words']}"
    return (f"{name:8s} matched {summary['matched']}/{summary['reference_words']}  "
            f"start |err| median {summary['start_median_abs_s']:.3f} s (mean {summary['start_mean_s']:+.3f}), "
            f"within 0.1/0.25 s {summary['start_within_0.1']:.0%}/{summary['start_within_0.25']:.0%}  "
            f"end |err| median {summary['end_median_abs_s']:.3f} s (mean {summary['end_mean_s']:+.3f}), "
            f"within {summary['end_within_0.1']:.0%}/{summary['end_within_0.25']:.0%}  "
            f"middle inside the word {summary['middle_inside']:.0%}")


@cli
def main(argv=None) -> int:
    args = get_parser().parse_args(argv)
    if not args.model.is_file():
        raise DuetError(f"model file not found: {args.model}")
    if not 1 <= args.min_words <= args.max_words:
        raise DuetError(f"--min-words {args.min_words} / --max-words {args.max_words}: need 1 <= min <= max")
    if not 0 <= args.min_pause <= args.max_pause:
        raise DuetError(f"--min-pause {args.min_pause} / --max-pause {args.max_pause}: need 0 <= min <= max")
    if args.utterances < 1 or args.threads < 1:
        raise DuetError(f"--utterances and --threads must be >= 1, got {args.utterances} and {args.threads}")
    if not args.verbose:
        print(f"word_times: NeMo's log lines: {args.log} (--verbose shows them)", file=sys.stderr)
    results = {}
    with library_output_to(log_target(args)) as (out, err):
        # both models load before any speech is made: a file that does not restore costs nothing
        torch.set_num_threads(args.threads)
        model = load_asr_model(args.model, device="cpu")
        decoder = build_decoder(model, read_decoding_file(decoding_file_for(args.model)).settings) \
            if args.pipeline_decoding else greedy_decoder(model)
        systems = {"ours": functools.partial(ours, model, decoder)}
        if not args.no_whisper:
            systems["whisper"] = functools.partial(whisper, whisper_tiny_en(args.threads))
        audio_dir = args.out / "audio"
        shutil.rmtree(audio_dir, ignore_errors=True)  # no file of an earlier, longer run is left beside these
        audio_dir.mkdir(parents=True)
        utterances = build_utterances(audio_dir, args.utterances, args.min_words, args.max_words, args.min_pause,
                                      args.max_pause, args.seed, progress=err)
        paths = [path for path, _ in utterances]
        reference_words = sum(len(split_normalised(words)) for _, words in utterances)
        for name, run in systems.items():
            hypotheses = run(paths)
            pairs = [pair for (_, reference), hypothesis in zip(utterances, hypotheses)
                     for pair in timing_errors(reference, hypothesis)]
            results[name] = summarise(pairs, reference_words)
            print(report(name, results[name]), file=out, flush=True)
    write_text_atomic(args.out / "word_times.json", json.dumps(
        {"model": str(args.model), "utterances": len(utterances), "settings": {k: str(v) for k, v in vars(args).items()},
         "results": results}, indent=2) + "\n")
    print(f"word_times: {len(utterances)} utterances, {reference_words} words -> {args.out / 'word_times.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
