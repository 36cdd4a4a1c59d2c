#!/usr/bin/env python
r"""Distillation A/B: the same student trained from the same start with and without the teacher term, same steps.

Usage:
  # the bundled base (student) and the Whisper base (teacher) on configs/distil_tiny_mix.yaml's mix, 150 steps each
  python bench/distillation_ab.py --steps 150

  # other manifests (equal shares unless --train-weights), student, teacher or config; extra overrides after --
  python bench/distillation_ab.py --steps 300 --student my_student.nemo --teacher my_teacher.nemo \
      --train data/general_3h/manifests/train-clean.json data/speechocean762/train.train.json \
      --train-weights 0.6 0.4 --dev data/speechocean762/train.dev.json -- distillation.weight=1.0

Both arms run the real recipe, nemo_recipes/finetune_ctc.py, in their own process with the same overrides (student
checkpoint, manifests, trainer.max_steps, seed); the teacher arm adds distillation.teacher=<teacher>, the other sets
it to null. The teacher, the starting student and each trained student are then scored greedy by duet.asr.generalisation (the library of
bench/asr_generalisation.py) on every held-out set there is: the sample's test-clean, the unseen voices where
data/unseen_voices is built, and every set of ../shared/real_speech where that folder exists.

Outputs in --out (default experiments/distillation_ab): the two run folders (ab_no_teacher/, ab_teacher/), scores/
with each model's per-set JSONL, ab_results.json and ab_table.md (WER per set side by side, median seconds per
training step, the commands).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from duet import SAMPLES_DIR
from duet.foundation import EXPERIMENTS, REPO_ROOT
from duet.foundation.errors import cli
from duet.foundation.files import write_text_atomic
from duet.errors import DuetError
from duet.data.real_speech import DEFAULT_ROOT
from duet.synth.corpus import UNSEEN_SPLIT

RECIPE = REPO_ROOT / "nemo_recipes" / "finetune_ctc.py"
CHECKPOINTS = SAMPLES_DIR / "checkpoints"
ARMS = ("no_teacher", "teacher")


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, required=True, help="optimizer steps of each arm (the same for both)")
    p.add_argument("--student", type=Path, default=CHECKPOINTS / "fastconformer_tiny_base.nemo",
                   help="the student's starting checkpoint (both arms)")
    p.add_argument("--teacher", type=Path, default=CHECKPOINTS / "whisper_tiny_ctc.nemo")
    p.add_argument("--config-name", default="distil_tiny_mix", help="recipe config (configs/)")
    p.add_argument("--train", type=Path, nargs="+", default=None,
                   help="training manifests (default: the config's mix)")
    p.add_argument("--train-weights", type=float, nargs="+", default=None, help="their shares (default equal)")
    p.add_argument("--dev", type=Path, default=None, help="validation manifest (default: the config's)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--real-speech", type=Path, default=DEFAULT_ROOT, help="held-out real-speech sets (if present)")
    p.add_argument("--unseen-root", type=Path, default=REPO_ROOT / "data" / "unseen_voices" / "LibriSpeech",
                   help="the unseen-voices corpus (scored if built: bench/asr_generalisation.py builds it)")
    p.add_argument("--no-teacher-score", action="store_true", help="leave the teacher's column out")
    p.add_argument("--out", type=Path, default=EXPERIMENTS / "distillation_ab")
    p.add_argument("--force", action="store_true", help="delete earlier runs in --out first")
    p.add_argument("overrides", nargs="*", help="extra Hydra overrides for both runs (after --)")
    return p


def train_overrides(args) -> list[str]:
    """The overrides both arms share."""
    common = [f"--config-name={args.config_name}", f"exp_manager.exp_dir={args.out}", f"seed={args.seed}",
              f"init_from_nemo_model={args.student}", f"trainer.max_steps={args.steps}",
              f"trainer.val_check_interval={args.steps}", f"exp_manager.checkpoint_callback_params.every_n_train_steps={args.steps}"]
    if args.train:
        weights = args.train_weights or [1.0 / len(args.train)] * len(args.train)
        sources = ",".join(f"{{type:nemo,manifest_filepath:'{m}',weight:{w}}}" for m, w in zip(args.train, weights))
        common.append(f"model.train_ds.input_cfg=[{sources}]")
    if args.dev:
        common.append(f"model.validation_ds.manifest_filepath={args.dev}")
    return [*common, *args.overrides]


def train_arm(args, arm: str) -> dict:
    """Run the recipe for one arm; returns its command, trained .nemo, steps and median step time."""
    # torch and NeMo take ~30 s to import: --help and argument errors answer before they load
    from duet.asr.recipe import median_step_seconds

    name = f"ab_{arm}"
    run_dir = args.out / name
    if run_dir.exists() and args.force:
        shutil.rmtree(run_dir)
    elif (run_dir / "finetune_summary.json").exists():
        raise DuetError(f"{run_dir} holds a finished run; use --force to redo it or another --out")
    teacher = str(args.teacher) if arm == "teacher" else "null"
    command = [*train_overrides(args), f"name={name}", f"distillation.teacher={teacher}"]
    result = {"arm": arm, "command": "python nemo_recipes/finetune_ctc.py " + " ".join(command)}
    print(f"distillation_ab: {arm}: {result['command']}", flush=True)
    start = time.time()
    proc = subprocess.run([sys.executable, str(RECIPE), *command], cwd=REPO_ROOT)
    result["wall_seconds"] = round(time.time() - start, 1)
    summary_path = run_dir / "finetune_summary.json"
    if proc.returncode != 0 or not summary_path.is_file():
        raise DuetError(f"{arm}: the recipe exited with code {proc.returncode} (log in {run_dir})")
    summary = json.loads(summary_path.read_text())
    result.update(model=summary["model"], steps=summary["global_step"], distillation=summary.get("distillation"),
                  step_seconds=median_step_seconds(Path(summary["log_dir"])))
    return result


def held_out_sets(args) -> list:
    """Every held-out set present here: the sample's test-clean, the unseen voices if built, the real sets."""
    # torch and NeMo take ~30 s to import: --help and argument errors answer before they load
    from duet.asr import generalisation

    sets = [s for s in generalisation.sample_and_unseen_sets(SAMPLES_DIR / "LibriSpeech" / "test-clean",
                                                             args.unseen_root / UNSEEN_SPLIT) if s.split_dir.is_dir()]
    if args.real_speech.is_dir():
        sets += generalisation.real_sets(args.real_speech)
    else:
        print(f"distillation_ab: {args.real_speech} missing: the real-speech sets are left out", file=sys.stderr)
    return sets


def score(label: str, nemo_path: Path, sets: list, out_dir: Path) -> list[dict]:
    # torch and NeMo take ~30 s to import: --help and argument errors answer before they load
    from duet.asr import generalisation, inference

    model = inference.load_asr_model(nemo_path, device="cpu")
    print(f"distillation_ab: scoring {label} ({nemo_path}) on {len(sets)} sets", file=sys.stderr, flush=True)
    return generalisation.score_sets(model, sets, out_dir / label, on_result=lambda r: print(
        f"  {label} {r['set']}: WER {100 * r['wer']:.2f}%", file=sys.stderr, flush=True))


def format_table(args, arms: list[dict], scores: dict[str, list[dict]]) -> str:
    columns = [c for c in ("teacher", "start", "no_teacher", "teacher_term") if c in scores]
    heads = {"teacher": f"teacher `{args.teacher.name}`", "start": "student at the start", "no_teacher": "student, CTC only",
             "teacher_term": "student, CTC + teacher term"}
    by_arm = {a["arm"]: a for a in arms}
    lines = [f"Distillation A/B: `{args.student.name}` trained {args.steps} steps from the same start, seed {args.seed}, "
             f"config `{args.config_name}`; greedy WER %.", "",
             "| set | utts | " + " | ".join(heads[c] for c in columns) + " |",
             "|---|---:|" + "---:|" * len(columns)]
    for i, row in enumerate(scores[columns[0]]):
        cells = [f"{100 * scores[c][i]['wer']:.2f}" for c in columns]
        lines.append(f"| {row['set']} | {row['utterances']} | " + " | ".join(cells) + " |")
    seconds = {"no_teacher": by_arm["no_teacher"]["step_seconds"], "teacher_term": by_arm["teacher"]["step_seconds"]}
    lines.append("| train s/step (median) | | " + " | ".join(
        "" if c not in seconds else f"{seconds[c]:.2f}" if seconds[c] else "n/a" for c in columns) + " |")
    lines += ["", "Commands:", ""] + [f"- {a['arm']}: `{a['command']}`" for a in arms]
    return "\n".join(lines) + "\n"


@cli
def main(argv=None) -> int:
    args = get_parser().parse_args(argv)
    for flag, path in (("--student", args.student), ("--teacher", args.teacher), *(("--train", m) for m in args.train or []),
                       *((("--dev", args.dev),) if args.dev else ())):
        if not path.is_file():
            raise DuetError(f"{flag}: file not found: {path}")
    if args.train_weights and len(args.train_weights) != len(args.train or []):
        raise DuetError(f"--train-weights: {len(args.train_weights)} weights for {len(args.train or [])} manifests")
    args.out = args.out.resolve()
    start = time.time()
    arms = [train_arm(args, arm) for arm in ARMS]
    sets = held_out_sets(args)
    scores = {} if args.no_teacher_score else {"teacher": score("teacher", args.teacher, sets, args.out / "scores")}
    scores["start"] = score("start", args.student, sets, args.out / "scores")
    scores["no_teacher"] = score("no_teacher", Path(arms[0]["model"]), sets, args.out / "scores")
    scores["teacher_term"] = score("teacher_term", Path(arms[1]["model"]), sets, args.out / "scores")
    write_text_atomic(args.out / "ab_results.json", json.dumps({"arms": arms, "scores": scores}, indent=2) + "\n")
    table = format_table(args, arms, scores)
    write_text_atomic(args.out / "ab_table.md", table)
    print(table)
    print(f"distillation_ab: done in {(time.time() - start) / 60:.1f} min; table in {args.out / 'ab_table.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
