r"""Choose the pipeline's low-confidence threshold for a model: how often it would flag what it heard right and
what it heard wrong.

Usage:
  # the FastConformer base, greedy (no decoding file of its own), tuned on the sample's dev split and the dev speakers
  # of speechocean762/train; then scored once, at the chosen threshold, on held-out real speech
  python tools/make_manifest.py                                  # manifests/dev-clean.json
  python tools/make_manifest.py --data-root ../shared/real_speech/speechocean762 --splits train \
      --out-dir /tmp/so762 --dev-speakers 8                      # /tmp/so762/train.dev.json
  python bench/confidence_threshold.py --model samples/checkpoints/fastconformer_tiny_base.nemo \
      --tune manifests/dev-clean.json /tmp/so762/train.dev.json \
      --held-out-sets speechocean762/test read_sentences
  # the demo's model decodes as its decoding.json says (beam 16 + LM + Whisper), as tools/pipeline.py does
  python bench/confidence_threshold.py --model experiments/demo_asr/demo_asr.nemo \
      --tune manifests/dev-clean.json /tmp/so762/train.dev.json --held-out-sets speechocean762/test read_sentences

Each utterance is transcribed with word confidences (``duet.asr.words``, the pipeline's own path) and gets
the utterance confidence the pipeline uses (``duet.asr.confidence.utterance_confidence``) and its own WER. It was
heard right when that WER is at most --wer-bound (default 0.25: at most one word in four wrong), badly
otherwise; an empty transcript counts as flagged (the pipeline does not answer it either). For each threshold
the table gives, over the --tune manifests together, the share of the rightly heard utterances that would be
flagged (wrongly: the user would be asked again) and the share of the badly heard ones that would be flagged
(rightly: the language model would otherwise answer something that was not said). The chosen threshold is
the highest at which at most --max-right-flagged (default 10 %) of the rightly heard are flagged. The
``--held-out-sets`` (evaluation-only sets of ../shared/real_speech) are never used to choose: they are scored at
the chosen threshold and at the model's current one only (what tools/pipeline.py would use: the min_confidence
of the decoding.json beside the model when it decodes as that file says, else duet.asr.confidence's
DEFAULT_MIN_CONFIDENCE). --out writes everything as JSON, per utterance included. NeMo's log lines go to --log
(experiments/logs/confidence_threshold.log) unless --verbose shows them.

--greedy-too (for a beam-search model) also transcribes every utterance greedily from the same model and compares
other signals with the pipeline's: the greedy transcript's own confidence, the agreement of the two transcripts
(1 - their character error rate: where the LM rewrote much of what the acoustics said, the model was unsure) and
the pipeline's confidence times that agreement. Each signal gets its own threshold by the same rule on the --tune
manifests, and is scored at it on the held-out sets:

  python bench/confidence_threshold.py --model experiments/demo_asr/demo_asr.nemo --greedy-too \
      --tune manifests/dev-clean.json /tmp/so762/train.dev.json --held-out-sets speechocean762/test read_sentences common_voice

Where the chosen threshold goes: DEFAULT_MIN_CONFIDENCE (duet/asr/confidence.py) for the FastConformer base checkpoint
(and any model without a decoding file), DEMO_MIN_CONFIDENCE (duet/demo/stages.py, written into the demo model's
decoding.json) for the demo's fine-tune, the "min_confidence" of its own decoding file for any other model (the
Whisper base's: samples/checkpoints/whisper_tiny_ctc.decoding.json).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import jiwer

from duet.asr.batching import OfflineBatching
from duet.asr.decoding import CtcDecoder, DecodingSettings, build_decoder, greedy_decoder
from duet.asr.generalisation import build_manifest, real_sets
from duet.asr.inference import load_asr_model, transcribe_files_with_words
from duet.asr.scoring import score
from duet.cli.cli_args import add_decoding_arguments, add_log_arguments, log_target, model_decoding_from_args
from duet.asr.confidence import utterance_confidence
from duet.errors import DuetError
from duet.data.real_speech import DEFAULT_ROOT, HELD_OUT_SETS
from duet.foundation.errors import cli
from duet.foundation.files import library_output_to, read_jsonl, write_text_atomic

THRESHOLDS = [round(0.05 * i, 2) for i in range(1, 20)]


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, type=Path, help="a CTC .nemo checkpoint")
    parser.add_argument("--tune", nargs="+", required=True, type=Path, metavar="MANIFEST",
                        help="held-in manifests the threshold is chosen on (never a held-out set)")
    parser.add_argument("--held-out-sets", nargs="+", default=[], choices=HELD_OUT_SETS, metavar="SET",
                        help=f"evaluation-only sets of --real-speech, scored at the chosen threshold: "
                             f"{', '.join(HELD_OUT_SETS)}")
    parser.add_argument("--real-speech", type=Path, default=DEFAULT_ROOT, help=f"default {DEFAULT_ROOT}")
    parser.add_argument("--wer-bound", type=float, default=0.25,
                        help="an utterance was heard right when its WER is at most this (default 0.25)")
    parser.add_argument("--max-right-flagged", type=float, default=0.10,
                        help="the chosen threshold flags at most this share of the rightly heard (default 0.10)")
    parser.add_argument("--batch-size", type=int, default=OfflineBatching.batch_size)
    parser.add_argument("--out", type=Path, default=None, help="also write the table and the scores as JSON")
    parser.add_argument("--greedy-too", action="store_true",
                        help="also decode greedily and compare the other signals (see above); beam decodings only")
    add_log_arguments(parser, "confidence_threshold")
    add_decoding_arguments(parser, "--decoding", strategy_default=(
        "the decoding.json beside the model, as tools/pipeline.py decodes; greedy without one"))
    return parser


def score_manifest(model, decoder: CtcDecoder, manifest: Path, batch_size: int) -> list[dict]:
    """One row per utterance of ``manifest`` as ``decoder`` hears it (``duet.asr.scoring``'s: file, ref, hyp, wer)
    with its utterance confidence (None: empty transcript); utterances without a reference text are left out."""
    entries = read_jsonl(manifest)
    files = [e["audio_filepath"] for e in entries]
    heard = transcribe_files_with_words(model, files, batch_size=batch_size, decoder=decoder)
    scored = score(files, [e["text"] for e in entries], [t.text for t in heard], [e["duration"] for e in entries])
    rows = []
    for record, timed in zip(scored.records, heard):
        if record["wer"] is None:
            continue
        words = timed.words if record["hyp"] else None
        rows.append({**record, "confidence": utterance_confidence(words),
                     # the same without the lexicon check (every word counted as heard), for comparison
                     "acoustic_confidence": utterance_confidence(words, lexicon=None),
                     # the least sure word, for comparison with the mean the pipeline uses
                     "min_word": min((w.confidence for w in words), default=None) if words else None})
    return rows


#: the signals compared, each a row key: the pipeline's first; the last three need --greedy-too
SIGNALS = ("confidence", "acoustic_confidence", "greedy_confidence", "agreement", "confidence_x_agreement")


def add_greedy_signals(rows: list[dict], greedy_rows: list[dict]) -> None:
    """Give each row of the model's own decoding the signals of its greedy twin (the same utterance, in order)."""
    for row, twin in zip(rows, greedy_rows, strict=True):
        if row["id"] != twin["id"]:
            raise RuntimeError(f"greedy rows out of order: {row['id']} vs {twin['id']}")
        agreement = max(0.0, 1.0 - jiwer.cer(row["hyp"], twin["hyp"])) if row["hyp"] and twin["hyp"] else 0.0
        row.update(greedy_hyp=twin["hyp"], greedy_confidence=twin["confidence"], agreement=round(agreement, 4),
                   confidence_x_agreement=None if row["confidence"] is None
                   else round(row["confidence"] * agreement, 4))


def signal_lines(tune_rows: list[dict], held_out: dict[str, list[dict]], wer_bound: float,
                 max_right_flagged: float, keys: tuple[str, ...] = SIGNALS) -> list[str]:
    """For each signal of ``keys``: its threshold chosen on ``tune_rows`` by the rule of :func:`choose`, and the
    shares of the rightly / badly heard it flags there and on each held-out set."""
    lines = []
    for key in keys:
        chosen = choose(threshold_table(tune_rows, wer_bound, key), max_right_flagged)
        if chosen is None:
            lines.append(f"{key}: no threshold flags <= {100 * max_right_flagged:g} % of the rightly heard")
            continue
        parts = []
        for name, rows in {"tune": tune_rows, **held_out}.items():
            at = next(row for row in threshold_table(rows, wer_bound, key) if row["threshold"] == chosen)
            parts.append(f"{name} {percent(at['right_flagged']).strip()} / {percent(at['bad_flagged']).strip()} %")
        lines.append(f"{key} at {chosen:g}: right / bad flagged: " + "; ".join(parts))
    return lines


def flagged(row: dict, threshold: float, key: str = "confidence") -> bool:
    return row[key] is None or row[key] < threshold


def share(rows: list[dict], threshold: float, key: str = "confidence") -> float | None:
    return sum(flagged(r, threshold, key) for r in rows) / len(rows) if rows else None


def threshold_table(rows: list[dict], wer_bound: float, key: str = "confidence") -> list[dict]:
    right = [r for r in rows if r["wer"] <= wer_bound]
    bad = [r for r in rows if r["wer"] > wer_bound]
    return [{"threshold": t, "right_flagged": share(right, t, key), "bad_flagged": share(bad, t, key),
             "all_flagged": share(rows, t, key)} for t in THRESHOLDS]


def choose(table: list[dict], max_right_flagged: float) -> float | None:
    """The highest threshold flagging at most ``max_right_flagged`` of the rightly heard (None: none does)."""
    ok = [row["threshold"] for row in table if (row["right_flagged"] or 0.0) <= max_right_flagged]
    return max(ok) if ok else None


def percent(value: float | None) -> str:
    return "    -" if value is None else f"{100 * value:5.1f}"


def format_table(table: list[dict], other: list[dict]) -> str:
    lines = ["threshold | right flagged | bad flagged | all flagged || min-word: right / bad flagged"]
    for row, alt in zip(table, other):
        lines.append(f"{row['threshold']:9.2f} | {percent(row['right_flagged']):>11} % | "
                     f"{percent(row['bad_flagged']):>9} % | {percent(row['all_flagged']):>9} % || "
                     f"{percent(alt['right_flagged'])} % / {percent(alt['bad_flagged'])} %")
    return "\n".join(lines)


@cli
def main(argv: list[str] | None = None) -> int:
    parser = get_parser()
    args = parser.parse_args(argv)
    for manifest in args.tune:
        if not manifest.is_file():
            parser.error(f"--tune {manifest}: no such manifest")
    # the model's decoding and threshold as the pipeline resolves them
    resolved = model_decoding_from_args(args, args.model, strategy_flag="--decoding")
    settings, source, current = resolved.settings, resolved.source, resolved.min_confidence
    held_out = real_sets(args.real_speech, tuple(args.held_out_sets)) if args.held_out_sets else []
    if not args.model.is_file():
        raise DuetError(f"--model {args.model} does not exist")
    if args.greedy_too and settings.strategy == "greedy":
        parser.error("--greedy-too compares a beam search with greedy decoding; this model decodes greedily")
    if not args.verbose:
        print(f"confidence_threshold: NeMo's log lines: {args.log} (--verbose shows them)", file=sys.stderr)
    with library_output_to(log_target(args)) as (out, _):
        return run(args, settings, source, current, held_out, out)


def run(args: argparse.Namespace, settings: DecodingSettings, source: str | None, current: float, held_out: list,
        out) -> int:
    """Score the --tune manifests, choose, score the held-out sets; every line of the report goes to ``out``."""
    model = load_asr_model(args.model)
    decoder = build_decoder(model, settings)
    decoding = settings.describe() + (f" from {source}" if source else "")
    print(f"model {args.model}, decoding {decoding}, current threshold {current:g}; right = utterance WER <= "
          f"{args.wer_bound:g}", file=out, flush=True)

    sets = {}
    for manifest in args.tune:
        sets[str(manifest)] = score_manifest(model, decoder, manifest, args.batch_size)
    tune_rows = [r for name in sets for r in sets[name]]
    for name, rows in sets.items():
        right = sum(r["wer"] <= args.wer_bound for r in rows)
        print(f"tune {name}: {len(rows)} utterances, {right} heard right", file=out, flush=True)
    table = threshold_table(tune_rows, args.wer_bound)
    print(format_table(table, threshold_table(tune_rows, args.wer_bound, key="min_word")), file=out)
    chosen = choose(table, args.max_right_flagged)
    print(f"chosen threshold (highest flagging <= {100 * args.max_right_flagged:g} % of the rightly heard): "
          f"{chosen if chosen is not None else 'none'}", file=out, flush=True)

    evaluated = {}
    with tempfile.TemporaryDirectory(prefix="confidence-") as folder:
        # built once: the greedy pass reads the same held-out manifests
        manifests = {eval_set.name: build_manifest(eval_set, Path(folder)) for eval_set in held_out}
        for eval_set in held_out:
            rows = score_manifest(model, decoder, manifests[eval_set.name], args.batch_size)
            evaluated[eval_set.name] = rows
            at = {t: share(rows, t) for t in {current, *([chosen] if chosen is not None else [])}}
            right = sum(r["wer"] <= args.wer_bound for r in rows)
            print(f"held out {eval_set.name}: {len(rows)} utterances ({right} heard right); flagged "
                  + ", ".join(f"{100 * s:.1f} % at {t:g}" for t, s in sorted(at.items())), file=out, flush=True)
        if args.greedy_too:
            greedy = greedy_decoder(model)
            for rows, manifest in zip(sets.values(), args.tune):
                add_greedy_signals(rows, score_manifest(model, greedy, manifest, args.batch_size))
            for name, manifest in manifests.items():
                add_greedy_signals(evaluated[name], score_manifest(model, greedy, manifest, args.batch_size))
    keys = SIGNALS if args.greedy_too else SIGNALS[:2]
    print("\n".join(["signals, each at its own threshold (confidence: the pipeline's; acoustic_confidence: the same "
                      "without the lexicon check):",
                      *signal_lines(tune_rows, evaluated, args.wer_bound, args.max_right_flagged, keys)]), file=out)
    if args.out:
        write_text_atomic(args.out, json.dumps({
            "model": str(args.model), "decoding": decoding, "current": current, "wer_bound": args.wer_bound,
            "max_right_flagged": args.max_right_flagged, "chosen": chosen, "table": table,
            "tune": sets, "held_out": evaluated}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
