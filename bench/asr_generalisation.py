r"""Score a CTC model on sets at increasing distance from training: its own sample, unseen voices, real people.

Usage:
  # the bundled base, greedy: sample test-clean, unseen synthetic voices, every held-out real-speech set
  python bench/asr_generalisation.py --model samples/checkpoints/fastconformer_tiny_base.nemo

  # the demo's model with the pipeline's decoding (beam + the demo's token LM + Whisper's rescoring)
  python bench/asr_generalisation.py --model experiments/demo_asr/demo_asr.nemo --decoding beam_lm \
      --lm experiments/demo_lm/lm_text_token6.arpa --alpha 1.1 --beta 4 --beam-size 16 --whisper-weight 0.5

  # the tool a user would pick instead, on the same sets: Whisper tiny.en with its own decoder (faster-whisper,
  # greedy, int8; its digits spelt out and punctuation dropped like every transcript scored here)
  python bench/asr_generalisation.py --model whisper-tiny.en

  # without the real recordings (a machine without ../shared), or from another folder
  python bench/asr_generalisation.py --model my.nemo --no-real
  python bench/asr_generalisation.py --model my.nemo --real-speech /data/real_speech

  # a quicker, rougher look: at most 200 utterances of each set, spread over its speakers
  python bench/asr_generalisation.py --model my.nemo --max-utterances 200

Sets, nearest to training first:
  sample test-clean   samples/LibriSpeech/test-clean: the sample's held-out synthetic speakers (telephone band)
  unseen voices       TTS voices that no training pool contains, speaking WordNet sentences that no training
                      corpus holds; built on first use into data/unseen_voices/ (needs the TTS engines that
                      tools/setup.sh installs)
  real sets           every held-out set of ../shared/real_speech (speechocean762/test, read_sentences,
                      common_voice, digits, librispeech_clips); never trained or tuned on (its README). A missing folder is
                      an error naming it; --no-real leaves the real sets out.

Prints one table (set, utterances, audio, WER, CER) and writes <out-dir>/generalisation.json (rows, model,
decoding) with each set's per-utterance JSONL beside it.
"""

import argparse
import json
import sys
import time
from pathlib import Path

from duet import SAMPLES_DIR
from duet.asr import decoding, generalisation, inference
from duet.asr.batching import EVALUATION_BATCHING, OfflineBatching
from duet.asr.pseudo_labelling import WHISPER_TEACHER, WhisperTeacher, manifest_text
from duet.cli.cli_args import (add_batching_arguments, add_decoding_arguments, decoding_settings_from_args,
                           offline_batching_from_args)
from duet.errors import DuetError
from duet.data.real_speech import DEFAULT_ROOT, HELD_OUT_SETS
from duet.synth.corpus import UNSEEN_SPLIT, build_unseen_voices
from duet.synth.tts import missing_engines
from duet.foundation import EXPERIMENTS, REPO_ROOT
from duet.foundation.errors import cli
from duet.foundation.files import write_text_atomic

UNSEEN_ROOT = REPO_ROOT / "data" / "unseen_voices" / "LibriSpeech"
UNSEEN_UTTERANCES = 200


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, type=Path,
                        help=f"a CTC .nemo checkpoint, or {WHISPER_TEACHER} (Whisper with its own decoder)")
    parser.add_argument("--real-speech", type=Path, default=DEFAULT_ROOT,
                        help=f"folder of the real recordings (default {DEFAULT_ROOT})")
    parser.add_argument("--no-real", action="store_true", help="leave the real-speech sets out")
    parser.add_argument("--sets", nargs="+", default=None, metavar="SET",
                        help="score only these sets (names as in the table: 'sample test-clean', "
                             f"'unseen voices', {', '.join(HELD_OUT_SETS)})")
    parser.add_argument("--sample-test", type=Path, default=SAMPLES_DIR / "LibriSpeech" / "test-clean",
                        help="the sample's test split folder")
    parser.add_argument("--unseen-root", type=Path, default=UNSEEN_ROOT,
                        help="corpus folder of the unseen-voices set (built there when missing)")
    parser.add_argument("--max-utterances", type=int, default=None, metavar="N",
                        help="score at most N utterances of each set, spread evenly over it (default: all)")
    parser.add_argument("--out-dir", type=Path, default=None,
                        help="results folder (default experiments/bench/generalisation/<model name>)")
    add_batching_arguments(parser, EVALUATION_BATCHING)
    add_decoding_arguments(parser, "--decoding")
    return parser


def unseen_split(root: Path) -> Path:
    """The unseen-voices split folder, synthesised first if it is not there yet."""
    split = root / UNSEEN_SPLIT
    if not split.is_dir():
        required, optional = missing_engines()
        if required:
            raise DuetError(f"unseen voices: {root} not built and {', '.join(required)} missing "
                            "(bash tools/setup.sh installs the TTS engines)")
        print(f"asr_generalisation: building the unseen-voices set into {root} (once)", file=sys.stderr)
        print(build_unseen_voices(root, UNSEEN_UTTERANCES, jobs=2, skip_engines=tuple(optional)), file=sys.stderr)
    return split


@cli
def main(argv=None) -> int:
    parser = get_parser()
    args = parser.parse_args(argv)
    if args.max_utterances is not None and args.max_utterances < 1:
        parser.error(f"--max-utterances must be at least 1, got {args.max_utterances}")
    settings = decoding_settings_from_args(args, "--decoding")
    batching = offline_batching_from_args(args, EVALUATION_BATCHING)
    whisper = str(args.model) == WHISPER_TEACHER
    if not whisper and not args.model.is_file():
        raise DuetError(f"--model: no such file: {args.model} (or {WHISPER_TEACHER})")
    wanted = set(args.sets) if args.sets else None
    sets = []
    if not wanted or wanted & {generalisation.SAMPLE_TEST_SET, "unseen voices"}:
        near = generalisation.sample_and_unseen_sets(
            args.sample_test, unseen_split(args.unseen_root) if not wanted or "unseen voices" in wanted
            else args.unseen_root / UNSEEN_SPLIT)
        sets += [s for s in near if not wanted or s.name in wanted]
    if not args.no_real:
        names = tuple(n for n in HELD_OUT_SETS if not wanted or n in wanted)
        sets += generalisation.real_sets(args.real_speech, names)
    unknown = sorted((wanted or set()) - {s.name for s in sets})
    if unknown:
        raise DuetError(f"--sets: unknown or excluded set(s): {', '.join(unknown)}")
    model, transcribe, described = None, None, settings.describe()
    if whisper:
        teacher = WhisperTeacher(threads=batching.workers or 2)
        described = "its own decoder, greedy (faster-whisper int8)"

        def transcribe(paths):
            return [manifest_text(text) for text, _ in
                    teacher.label([inference.load_audio(p, 16000) for p in paths])]
    else:
        model = inference.load_asr_model(args.model)
        decoder = decoding.build_decoder(model, settings)

        def transcribe(paths):  # score_sets decodes greedily unless given a transcriber: this one is its path
            return inference.transcribe_files(model, paths, batch_size=batching.batch_size, workers=batching.workers,
                                              decoder=decoder)
    out_dir = args.out_dir or EXPERIMENTS / "bench" / "generalisation" / args.model.stem
    start = time.time()
    print(f"asr_generalisation: {args.model} ({described}) on {len(sets)} sets", file=sys.stderr)
    rows = generalisation.score_sets(
        model, sets, out_dir, batch_size=batching.batch_size, workers=batching.workers, transcribe=transcribe,
        max_utterances=args.max_utterances,
        on_result=lambda r: print(f"  {r['set']}: WER {100 * r['wer']:.2f}% ({r['utterances']} utts)", file=sys.stderr))
    report = {"model": str(args.model), "decoding": described, "rows": rows,
              "wall_seconds": round(time.time() - start, 1)}
    write_text_atomic(out_dir / "generalisation.json", json.dumps(report, indent=2) + "\n")
    print(generalisation.format_table(rows))
    print(f"asr_generalisation: {len(rows)} sets in {report['wall_seconds']:.0f} s; wrote {out_dir / 'generalisation.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
