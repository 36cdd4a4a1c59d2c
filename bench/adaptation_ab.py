#!/usr/bin/env python
r"""A/B of adaptation recipes (tools/adapt.py) on speakers the bundled base never heard (issue #58).

Usage:
  # 3 of speechocean762/train's 8 dev speakers, the default recipes, one thread
  OMP_NUM_THREADS=1 python bench/adaptation_ab.py --speakers 3
  # chosen recipes only, and the 8 dev speakers pooled as one domain (>= 5 min to adapt on)
  python bench/adaptation_ab.py --recipes block_1e-4 all_1e-4 --pooled
  # one new synthetic voice (>= 5 min to adapt on), also scored under the demo's joint decoding
  python bench/adaptation_ab.py --speakers 0 --voice --recipes block_1e-4 block_1e-4_replay \
      --joint experiments/demo_asr/decoding.json --joint-max 150

Data: ../shared/real_speech/speechocean762/train only (its README: the one set that may be tuned on). Its 8 dev
speakers (duet.data.manifest.hold_out_speakers, as the base's training manifests carve them: none was trained on) are
the users. For each speaker, a hash-chosen half of their utterances is what the user gives tools/adapt.py (which
carves its own early-stopping part from it) and the other half is scored, greedy WER, base vs adapted; "others" is
the other dev speakers' utterances (up to --others of them), to show what moves elsewhere. --pooled adapts on the
8 speakers' halves together (one domain, ~6 min of audio) and scores their other halves; its "others" are
utterances of the base's own training speakers. Replay draws from the base's own training speakers.
--voice adds one synthetic voice that no training pool, sample or unseen-voices set has
(duet.synth.voices.ADAPTATION_VOICE), made here by duet.synth.corpus.build_voice_case: --voice-minutes of its
speech to adapt on and --voice-scored other utterances scored; its "others" are the bundled sample's test voices and
speechocean762/test (held out: scored only, never adapted or tuned on). --joint DECODING_JSON scores every model
of every case also with that decoding (e.g. the demo's, strategy joint), on up to --joint-max utterances of each set.

Outputs in --out (default experiments/adaptation_ab): one adapt run folder per speaker and recipe, results.json
and table.md (WER of the base, of each recipe, relative change, best step, minutes); --voice's audio in
<out>/voice_corpus (made once, then reused), the base's figures in each case folder's base.json (reused by a later
run on the same sets).
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

import torch

from duet import SAMPLES_DIR
from duet.asr import evaluation
from duet.asr.adaptation import AdaptationSettings, adapt, carve, greedy_wer
from duet.asr.decoding import build_decoder
from duet.asr.decoding.file import read_decoding_file
from duet.asr.inference import load_asr_model
from duet.foundation import EXPERIMENTS
from duet.foundation.errors import cli
from duet.foundation.files import write_text_atomic
from duet.data.manifest import build_split_manifest, hold_out_speakers, speaker_of, write_manifest
from duet.data.real_speech import DEFAULT_ROOT, TRAINABLE_SET, set_dir
from duet.synth.corpus import build_voice_case
from duet.synth.voices import ADAPTATION_VOICE

#: name -> the AdaptationSettings fields it changes from the defaults
RECIPES = {
    "head_3e-4": {"moving": "head", "lr": 3e-4, "replay_share": 0.0},
    "block_1e-4": {"moving": "block", "lr": 1e-4, "replay_share": 0.0},
    "block_3e-4": {"moving": "block", "lr": 3e-4, "replay_share": 0.0},
    "last_layer_1e-4": {"moving": "last_layer", "lr": 1e-4, "replay_share": 0.0},
    "all_1e-4": {"moving": "all", "lr": 1e-4, "replay_share": 0.0},
    "block_1e-4_replay": {"moving": "block", "lr": 1e-4, "replay_share": 0.3},
    # the tool's default: the replay drawn from the bundled sample's synthetic voices, which every user has
    "block_1e-4_sample_replay": {"moving": "block", "lr": 1e-4, "replay_share": 0.3, "replay": None},
    "all_1e-4_replay": {"moving": "all", "lr": 1e-4, "replay_share": 0.3},
    "block_1e-3": {"moving": "block", "lr": 1e-3, "replay_share": 0.0},
    "last_layer_3e-4": {"moving": "last_layer", "lr": 3e-4, "replay_share": 0.0},
    "all_3e-4": {"moving": "all", "lr": 3e-4, "replay_share": 0.0},
    "last_layer_3e-4_replay": {"moving": "last_layer", "lr": 3e-4, "replay_share": 0.3},
    "block_1e-4_200_steps": {"moving": "block", "lr": 1e-4, "replay_share": 0.0, "max_steps": 200},
}
DEV_SPEAKERS = 8  # as tools/demo.py and the base's training manifests carve speechocean762/train
SAMPLE_TEST = SAMPLES_DIR / "LibriSpeech" / "test-clean"
VOICE_OTHERS = "speechocean762/test"  # held out: scored only


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--real-speech", type=Path, default=DEFAULT_ROOT, help="the real-speech folder")
    parser.add_argument("--speakers", type=int, default=3, help="how many dev speakers adapt one by one (default 3)")
    parser.add_argument("--recipes", nargs="+", choices=sorted(RECIPES), default=list(RECIPES)[:6])
    parser.add_argument("--pooled", action="store_true", help="also adapt on the dev speakers' halves together")
    parser.add_argument("--others", type=int, default=40, help="utterances scored as 'others' (default 40)")
    parser.add_argument("--voice", action="store_true", help="also adapt to one new synthetic voice")
    parser.add_argument("--voice-minutes", type=float, default=6.0, help="--voice: minutes to adapt on (default 6)")
    parser.add_argument("--voice-scored", type=int, default=40, help="--voice: utterances scored (default 40)")
    parser.add_argument("--joint", type=Path, metavar="DECODING_JSON", help="also score with this decoding file")
    parser.add_argument("--joint-max", type=int, help="--joint: at most this many utterances of each set")
    parser.add_argument("--max-steps", type=int, default=AdaptationSettings.max_steps)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=EXPERIMENTS / "adaptation_ab")
    return parser


def spaced(items: list, n: int) -> list:
    """``n`` items spread evenly over ``items`` (all of them when there are fewer)."""
    if len(items) <= n:
        return list(items)
    return [items[int(i * len(items) / n)] for i in range(n)]


def wers(model, folder: Path, parts: list[str], joint, reuse=None) -> tuple[dict, object]:
    """Greedy WER of ``model`` on each part's manifest in ``folder``; with ``joint`` (decoding settings) also
    "<part> joint" on the part's ``.joint.json``. Returns them and the joint decoder (its Whisper reused next time)."""
    result = {part: greedy_wer(model, folder / f"{part}.json") for part in parts}
    decoder = None
    if joint is not None:
        decoder = build_decoder(model, joint, reuse)
        for part in parts:
            scored = evaluation.evaluate_manifest(model, folder / f"{part}.joint.json", progress=False, decoder=decoder)
            result[f"{part} joint"] = float(scored.summary["wer"])
    return result, decoder


def run_case(name: str, adapt_on: list[dict], sets: dict[str, list[dict]], replay: list[dict], recipes: list[str],
             args, out: Path) -> dict:
    """The base and each recipe on one case: adapt on ``adapt_on``, WER on each of ``sets`` ("scored" first: the
    speaker's own held-out utterances; the others show what moves elsewhere)."""
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    write_manifest(folder / "adapt_on.json", adapt_on)
    write_manifest(folder / "replay.json", replay)
    for part, entries in sets.items():
        write_manifest(folder / f"{part}.json", entries)
        write_manifest(folder / f"{part}.joint.json", spaced(entries, args.joint_max or len(entries)))
    joint = read_decoding_file(args.joint).settings if args.joint else None
    parts = list(sets)
    # the base's figures are kept in the case folder: a later run with other recipes scores only those; the key holds
    # the decoding itself, not its file's name, so a file re-tuned in place is scored again
    base_key = {"base": str(AdaptationSettings.base),
                "sets": {part: [e["audio_filepath"] for e in entries] for part, entries in sets.items()},
                "joint": None if joint is None else {"strategy": joint.strategy, **joint.used_values()},
                "joint_max": args.joint_max}
    cached = json.loads((folder / "base.json").read_text()) if (folder / "base.json").is_file() else {}
    decoder = None
    if cached.get("key") == base_key:
        base_wers = cached["wers"]
    else:
        base_wers, decoder = wers(load_asr_model(AdaptationSettings.base, device="cpu"), folder, parts, joint)
        write_text_atomic(folder / "base.json", json.dumps({"key": base_key, "wers": base_wers}) + "\n")
    row = {"case": name, "adapt_minutes": round(sum(e["duration"] for e in adapt_on) / 60, 2),
           "adapt_utterances": len(adapt_on), "utterances": {part: len(e) for part, e in sets.items()},
           "joint": str(args.joint) if args.joint else None, "joint_max": args.joint_max, "base": base_wers,
           "recipes": {}}
    print(f"{name}: {len(adapt_on)} utterances ({row['adapt_minutes']} min) to adapt on; base WER "
          + ", ".join(f"{part} {100 * wer:.2f} %" for part, wer in base_wers.items()), flush=True)
    defaults = AdaptationSettings(source=folder / "adapt_on.json", out=folder, replay=folder / "replay.json",
                                  max_steps=args.max_steps, threads=args.threads)
    for recipe in recipes:
        settings = replace(defaults, out=folder / recipe, **RECIPES[recipe])
        start = time.time()
        metrics = adapt(settings, say=lambda line: None)
        minutes = round((time.time() - start) / 60, 2)
        result, decoder = wers(load_asr_model(settings.out / "model.nemo", device="cpu"), folder, parts, joint, decoder)
        result.update(best_step=metrics["best_step"], steps_run=metrics["steps_run"], minutes=minutes,
                      early_stop_wer=[metrics["held_out_wer_before"], metrics["held_out_wer_after"]])
        row["recipes"][recipe] = result
        print(f"  {recipe}: " + ", ".join(f"{part} {100 * result[part]:.2f} %" for part in base_wers)
              + f"; step {result['best_step']} of {result['steps_run']}, {minutes} min", flush=True)
        write_text_atomic(out / "results.partial.json", json.dumps(row, indent=2) + "\n")
    return row


def table(rows: list[dict], recipes: list[str]) -> str:
    lines = ["| case (adapt min) | base | " + " | ".join(recipes) + " |",
             "| --- | ---: | " + " | ".join("---:" for _ in recipes) + " |"]
    for row in rows:
        for part, base in row["base"].items():
            cells = []
            for recipe in recipes:
                wer = row["recipes"][recipe][part]
                cells.append(f"{100 * wer:.2f} ({100 * (wer - base) / base:+.1f} %)" if base else f"{100 * wer:.2f}")
            label = f"{row['case']} ({row['adapt_minutes']})" + ("" if part == "scored" else f", {part}")
            lines.append(f"| {label} | {100 * base:.2f} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


@cli
def main(argv: list[str] | None = None) -> int:
    args = get_parser().parse_args(argv)
    torch.set_num_threads(args.threads)
    split = set_dir(args.real_speech, TRAINABLE_SET)
    entries = build_split_manifest(split).entries
    trained_on, dev = hold_out_speakers(entries, DEV_SPEAKERS)
    speakers = sorted({speaker_of(e) for e in dev})
    replay = spaced(trained_on[0::2], 200)  # the other half of the base's speakers' utterances: pooled's "others"
    rows = []
    for speaker in speakers[:args.speakers]:
        own = [e for e in dev if speaker_of(e) == speaker]
        adapt_on, scored = carve(own, 0.5, seed=0)
        others = spaced([e for e in dev if speaker_of(e) != speaker], args.others)
        rows.append(run_case(f"speaker_{speaker}", adapt_on, {"scored": scored, "others": others}, replay,
                             args.recipes, args, args.out))
    if args.pooled:
        halves = [carve([e for e in dev if speaker_of(e) == s], 0.5, seed=0) for s in speakers]
        sets = {"scored": [e for _, s in halves for e in s], "others": spaced(trained_on[1::2], args.others)}
        rows.append(run_case("dev_speakers_pooled", [e for a, _ in halves for e in a], sets, replay, args.recipes,
                             args, args.out))
    if args.voice:
        corpus = args.out / "voice_corpus"
        if not (corpus / "SPEAKERS.txt").is_file():
            print(build_voice_case(corpus, ADAPTATION_VOICE, args.voice_minutes, args.voice_scored), flush=True)
        sets = {"scored": build_split_manifest(corpus / "dev-clean").entries,
                "sample_test_voices": build_split_manifest(SAMPLE_TEST).entries,
                VOICE_OTHERS.replace("/", "_"): build_split_manifest(set_dir(args.real_speech, VOICE_OTHERS)).entries}
        rows.append(run_case(f"voice_{ADAPTATION_VOICE.id}", build_split_manifest(corpus / "train-clean").entries,
                             sets, replay, args.recipes, args, args.out))
    write_text_atomic(args.out / "results.json", json.dumps(rows, indent=2) + "\n")
    write_text_atomic(args.out / "table.md", table(rows, args.recipes))
    print(table(rows, args.recipes))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
