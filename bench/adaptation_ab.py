#!/usr/bin/env python
"""A/B of adaptation recipes (tools/adapt.py) on speakers the bundled base never heard (issue #58).

Usage:
  # 3 of speechocean762/train's 8 dev speakers, the default recipes, one thread
  OMP_NUM_THREADS=1 python bench/adaptation_ab.py --speakers 3
  # chosen recipes only, and the 8 dev speakers pooled as one domain (>= 5 min to adapt on)
  python bench/adaptation_ab.py --recipes block_1e-4 all_1e-4 --pooled

Data: ../shared/real_speech/speechocean762/train only (its README: the one set that may be tuned on). Its 8 dev
speakers (duet.data.manifest.hold_out_speakers, as the base's training manifests carve them: none was trained on) are
the users. For each speaker, a hash-chosen half of their utterances is what the user gives tools/adapt.py (which
carves its own early-stopping part from it) and the other half is scored, greedy WER, base vs adapted; "others" is
the other dev speakers' utterances (up to --others of them), to show what moves elsewhere. --pooled adapts on the
8 speakers' halves together (one domain, ~6 min of audio) and scores their other halves; its "others" are
utterances of the base's own training speakers. Replay draws from the base's own training speakers.

Outputs in --out (default experiments/adaptation_ab): one adapt run folder per speaker and recipe, results.json
and table.md (WER of the base, of each recipe, relative change, best step, minutes).
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

from duet.asr.adaptation import AdaptationSettings, adapt, carve, greedy_wer
from duet.asr.inference import load_asr_model
from duet.foundation import EXPERIMENTS
from duet.foundation.errors import cli
from duet.foundation.files import write_text_atomic
from duet.data.manifest import build_split_manifest, hold_out_speakers, speaker_of, write_manifest
from duet.data.real_speech import DEFAULT_ROOT, TRAINABLE_SET, set_dir

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
}
DEV_SPEAKERS = 8  # as tools/demo.py and the base's training manifests carve speechocean762/train


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--real-speech", type=Path, default=DEFAULT_ROOT, help="the real-speech folder")
    parser.add_argument("--speakers", type=int, default=3, help="how many dev speakers adapt one by one (default 3)")
    parser.add_argument("--recipes", nargs="+", choices=sorted(RECIPES), default=list(RECIPES)[:6])
    parser.add_argument("--pooled", action="store_true", help="also adapt on the dev speakers' halves together")
    parser.add_argument("--others", type=int, default=40, help="utterances scored as 'others' (default 40)")
    parser.add_argument("--max-steps", type=int, default=AdaptationSettings.max_steps)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=EXPERIMENTS / "adaptation_ab")
    return parser


def spaced(items: list, n: int) -> list:
    """``n`` items spread evenly over ``items`` (all of them when there are fewer)."""
    if len(items) <= n:
        return list(items)
    return [items[int(i * len(items) / n)] for i in range(n)]


def run_case(name: str, adapt_on: list[dict], scored: list[dict], others: list[dict], replay: list[dict],
             recipes: list[str], args, out: Path) -> dict:
    """The base and each recipe on one case: adapt on ``adapt_on``, greedy WER on ``scored`` and ``others``."""
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    for file, entries in (("adapt_on.json", adapt_on), ("scored.json", scored), ("others.json", others),
                          ("replay.json", replay)):
        write_manifest(folder / file, entries)
    base = load_asr_model(AdaptationSettings.base, device="cpu")
    row = {"case": name, "adapt_minutes": round(sum(e["duration"] for e in adapt_on) / 60, 2),
           "adapt_utterances": len(adapt_on), "scored_utterances": len(scored),
           "base": {"scored": greedy_wer(base, folder / "scored.json"), "others": greedy_wer(base, folder / "others.json")},
           "recipes": {}}
    print(f"{name}: {len(adapt_on)} utterances ({row['adapt_minutes']} min) to adapt on; base WER "
          f"{100 * row['base']['scored']:.2f} % (others {100 * row['base']['others']:.2f} %)", flush=True)
    defaults = AdaptationSettings(source=folder / "adapt_on.json", out=folder, replay=folder / "replay.json",
                                  max_steps=args.max_steps, threads=args.threads)
    for recipe in recipes:
        settings = replace(defaults, out=folder / recipe, **RECIPES[recipe])
        start = time.time()
        metrics = adapt(settings, say=lambda line: None)
        model = load_asr_model(settings.out / "model.nemo", device="cpu")
        result = {"scored": greedy_wer(model, folder / "scored.json"), "others": greedy_wer(model, folder / "others.json"),
                  "best_step": metrics["best_step"], "steps_run": metrics["steps_run"],
                  "early_stop_wer": [metrics["held_out_wer_before"], metrics["held_out_wer_after"]],
                  "minutes": round((time.time() - start) / 60, 2)}
        row["recipes"][recipe] = result
        print(f"  {recipe}: {100 * result['scored']:.2f} % (others {100 * result['others']:.2f} %), step "
              f"{result['best_step']} of {result['steps_run']}, {result['minutes']} min", flush=True)
        write_text_atomic(out / "results.partial.json", json.dumps(row, indent=2) + "\n")
    return row


def table(rows: list[dict], recipes: list[str]) -> str:
    lines = ["| case (adapt min) | base | " + " | ".join(recipes) + " |",
             "| --- | ---: | " + " | ".join("---:" for _ in recipes) + " |"]
    for part in ("scored", "others"):
        for row in rows:
            base = row["base"][part]
            cells = []
            for recipe in recipes:
                wer = row["recipes"][recipe][part]
                cells.append(f"{100 * wer:.1f} ({100 * (wer - base) / base:+.0f} %)" if base else f"{100 * wer:.1f}")
            label = f"{row['case']} ({row['adapt_minutes']})" + ("" if part == "scored" else ", others")
            lines.append(f"| {label} | {100 * base:.1f} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


@cli
def main(argv: list[str] | None = None) -> int:
    args = get_parser().parse_args(argv)
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
        rows.append(run_case(f"speaker_{speaker}", adapt_on, scored, others, replay, args.recipes, args, args.out))
    if args.pooled:
        halves = [carve([e for e in dev if speaker_of(e) == s], 0.5, seed=0) for s in speakers]
        rows.append(run_case("dev_speakers_pooled", [e for a, _ in halves for e in a], [e for _, s in halves for e in s],
                             spaced(trained_on[1::2], args.others), replay, args.recipes, args, args.out))
    write_text_atomic(args.out / "results.json", json.dumps(rows, indent=2) + "\n")
    write_text_atomic(args.out / "table.md", table(rows, args.recipes))
    print(table(rows, args.recipes))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
