#!/usr/bin/env python
"""A/B study of encoder variants: baseline vs ResMHA vs progressive downsampling vs both (issue 7).

Usage:
  python tools/make_manifest.py && python tools/train_tokenizer.py --vocab-size 256   # its default data and tokenizer
  # fine-tune every variant from the bundled base checkpoint, same data, steps and seed (the default)
  python bench/asr_variants_ab.py --base samples/checkpoints/fastconformer_tiny_base.nemo --max-steps 300

  # train the tiny config from scratch instead (no checkpoint needed; its optimiser is already Noam)
  python bench/asr_variants_ab.py --from-scratch --config-name fastconformer_tiny --max-steps 300
  # a full-size config from scratch takes the report's schedule as an extra override
  python bench/asr_variants_ab.py --from-scratch --config-name fastconformer_small -- asr_optim=noam_scratch

  # only check that every variant keeps the CTC output at least as long as each transcript
  python bench/asr_variants_ab.py --check-only --base samples/checkpoints/fastconformer_tiny_base.nemo

Each variant runs the real recipe, nemo_recipes/finetune_ctc.py, in its own process with the same Hydra
overrides (manifests, tokenizer, trainer.max_steps, seed) plus the variant's encoder keys. From a
checkpoint, the base .nemo is first converted to the variant (same weights, strict load: ResMHA and
max-pooling reduction add no parameters; duet.asr.variants.convert_checkpoint), because the recipe
restores a checkpoint's own encoder. Before training, duet.asr.progressive.check_ctc_lengths verifies
the train/dev/test manifests fit the variant's frame rate; a variant that cannot is reported, not run.

Outputs in --out (default experiments/asr_variants_ab): one recipe run folder per variant
(ab_<variant>/: checkpoints, logs, test_{before,after}_*.json), ab_results.json and ab_table.md with
WER on the held-out voices (test manifest) before and after training, parameters, median training
time per step, transcription RTFx, encoder frame duration and the commands. Extra arguments after
`--` go to every recipe run (e.g. -- model.train_ds.batch_size=8).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

from hydra import compose, initialize_config_dir

from duet.asr import variants
from duet.asr.variants import VARIANTS
from duet.foundation import EXPERIMENTS, REPO_ROOT
from duet.foundation.errors import cli
from duet.foundation.files import write_text_atomic

RECIPE = REPO_ROOT / "nemo_recipes" / "finetune_ctc.py"
# NeMo 3 instantiates only allow-listed _target_ classes; importing duet.asr.resmha registers ResMHA's
# encoder before the recipe restores or builds a model (a no-op for the other variants).
RUN_RECIPE = ("import runpy, sys; import duet.asr.resmha; sys.argv[0] = {recipe!r}; "
              "runpy.run_path({recipe!r}, run_name='__main__')")


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    source = p.add_mutually_exclusive_group()
    source.add_argument("--base", type=Path, help="plain FastConformer/Conformer-CTC .nemo to fine-tune from")
    source.add_argument("--from-scratch", action="store_true", help="train --config-name from random weights")
    p.add_argument("--config-name", default=None,
                   help="recipe config (default: fastconformer_small with --base, fastconformer_tiny from scratch)")
    p.add_argument("--variants", nargs="+", default=["baseline", "resmha", "progressive", "resmha+progressive"])
    p.add_argument("--train", type=Path, default=REPO_ROOT / "manifests" / "train-clean.json")
    p.add_argument("--dev", type=Path, default=REPO_ROOT / "manifests" / "dev-clean.json")
    p.add_argument("--test", type=Path, default=REPO_ROOT / "manifests" / "test-clean.json",
                   help="held-out voices: WER and RTFx are measured here")
    p.add_argument("--tokenizer", type=Path, default=REPO_ROOT / "tokenizers" / "spe_bpe_v256")
    p.add_argument("--max-steps", type=int, default=300, help="optimizer steps per variant (same for all)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--out", type=Path, default=EXPERIMENTS / "asr_variants_ab")
    p.add_argument("--force", action="store_true", help="delete earlier runs of these variants in --out first")
    p.add_argument("--check-only", action="store_true", help="run the CTC length check for each variant and stop")
    p.add_argument("overrides", nargs="*", help="extra Hydra overrides for every run (after --)")
    return p


def compose_recipe_config(config_name: str, overrides: list[str]):
    with initialize_config_dir(config_dir=str(REPO_ROOT / "configs"), version_base=None):
        return compose(config_name, overrides=overrides)


def variant_setup(args, variant: str, run_dir: Path) -> tuple[list[str], object, list[str]]:
    """Hydra overrides selecting ``variant``, the model config it trains, encoder keys not from the base."""
    # NeMo takes ~21 s to import: --help and argument errors answer before it loads
    from nemo.collections.asr.models import ASRModel

    if args.base:
        init = run_dir / "init" / f"{args.base.stem}_{variant.replace('+', '_')}.nemo"
        reinitialised = variants.convert_checkpoint(args.base, variant, init)
        if reinitialised:
            print(f"asr_variants_ab: {variant}: {len(reinitialised)} encoder tensors start fresh "
                  f"(shape changed): {', '.join(sorted({k.rsplit('.', 1)[0] for k in reinitialised}))}", flush=True)
        return [f"init_from_nemo_model={init}"], ASRModel.restore_from(str(init), return_config=True), reinitialised
    encoder = compose_recipe_config(args.config_name, args.overrides).model.encoder
    overrides = variants.hydra_overrides(variant, encoder)
    return overrides, compose_recipe_config(args.config_name, [*args.overrides, *overrides]).model, []


def check_lengths(model_cfg, args) -> dict:
    # torch takes ~9 s to import: --help and argument errors answer before it loads
    from duet.asr.progressive import check_ctc_lengths

    reports = {m.name: check_ctc_lengths(model_cfg, m, args.tokenizer) for m in (args.train, args.dev, args.test)}
    tightest = min(reports.values(), key=lambda r: r.tightest_frames - r.tightest_required)
    return {"frame_ms": tightest.frame_ms, "tightest": str(tightest)}


def count_parameters(nemo_path: Path) -> int:
    # NeMo takes ~21 s to import: --help and argument errors answer before it loads
    from nemo.collections.asr.models import ASRModel

    model = ASRModel.restore_from(str(nemo_path), map_location="cpu")
    return sum(p.numel() for p in model.parameters())


def run_variant(args, variant: str) -> dict:
    # torch takes ~9 s to import: --help and argument errors answer before it loads
    from duet.asr.progressive import CtcLengthError
    from duet.asr.recipe import median_step_seconds

    name = f"ab_{variant.replace('+', '_')}"
    run_dir = args.out / name
    if run_dir.exists() and args.force and not args.check_only:
        shutil.rmtree(run_dir)
    elif (run_dir / "finetune_summary.json").exists() and not args.check_only:
        sys.exit(f"asr_variants_ab: {run_dir} holds a finished run; use --force to redo it or another --out")
    overrides, model_cfg, reinitialised = variant_setup(args, variant, run_dir)
    result = {"variant": variant, "reinitialised": sorted({k.rsplit(".", 1)[0] for k in reinitialised})}
    try:
        result.update(check_lengths(model_cfg, args))
    except CtcLengthError as e:
        print(f"asr_variants_ab: {variant}: CTC impossible, not trained: {e}", flush=True)
        return {**result, "error": f"CTC impossible: {e}"}
    print(f"asr_variants_ab: {variant}: {result['tightest']}", flush=True)
    if args.check_only:
        return result
    command = [
        f"--config-name={args.config_name}", f"name={name}", f"exp_manager.exp_dir={args.out}", f"seed={args.seed}",
        f"model.train_ds.manifest_filepath={args.train}", f"model.validation_ds.manifest_filepath={args.dev}",
        f"model.test_ds.manifest_filepath={args.test}", f"model.tokenizer.dir={args.tokenizer}",
        f"trainer.max_steps={args.max_steps}", "trainer.max_epochs=-1", *overrides, *args.overrides,
    ]
    result["command"] = "python nemo_recipes/finetune_ctc.py " + " ".join(command)
    print(f"asr_variants_ab: {variant}: {result['command']}", flush=True)
    start = time.time()
    proc = subprocess.run([sys.executable, "-c", RUN_RECIPE.format(recipe=str(RECIPE)), *command], cwd=REPO_ROOT)
    result["wall_seconds"] = round(time.time() - start, 1)
    summaries = sorted(run_dir.glob("**/finetune_summary.json"))
    if proc.returncode != 0 or not summaries:
        return {**result, "error": f"recipe exited with code {proc.returncode} (log in {run_dir})"}
    summary = json.loads(summaries[-1].read_text())
    log_dir = Path(summary["log_dir"])
    result.update(
        steps=summary.get("global_step"),
        wer_before=summary.get("test_before", {}).get("wer"),
        wer_after=summary["test_after"]["wer"],
        rtfx=summary["test_after"].get("rtfx"),
        step_seconds=median_step_seconds(log_dir),
        params=count_parameters(Path(summary["model"])),
        model=summary["model"],
    )
    return result


def format_table(results: list[dict], args) -> str:
    pct = lambda v: "n/a" if v is None else f"{100 * v:.2f}"  # noqa: E731
    source = f"fine-tuned from `{args.base}`" if args.base else f"`{args.config_name}` trained from scratch"
    lines = [
        f"Encoder variants, {source}, {args.max_steps} steps, seed {args.seed}; train `{args.train.name}`, "
        f"WER/RTFx on `{args.test.name}` (held-out voices), tokenizer `{args.tokenizer.name}`.",
        "",
        "| variant | params | fresh init | frame | WER before % | WER after % | train s/step (median) | RTFx |",
        "|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['variant']} | | | {r.get('frame_ms', '')} ms | {r['error']} | | | |")
            continue
        step = "n/a" if r.get("step_seconds") is None else f"{r['step_seconds']:.3f}"
        fresh = ", ".join(r["reinitialised"]) or ("-" if args.base else "all")
        lines.append(f"| {r['variant']} | {r['params'] / 1e6:.2f} M | {fresh} | {r['frame_ms']:g} ms | {pct(r['wer_before'])} | "
                     f"{pct(r['wer_after'])} | {step} | {r['rtfx']} |")
    lines += ["", "Commands (run by `" + " ".join(["python", "bench/asr_variants_ab.py", *sys.argv[1:]]) + "`):", ""]
    lines += [f"- {r['variant']}: `{r['command']}`" for r in results if "command" in r]
    return "\n".join(lines) + "\n"


@cli
def main(argv=None) -> int:
    args = get_parser().parse_args(argv)
    if not args.base and not args.from_scratch:
        sys.exit("asr_variants_ab: give --base path/to/base.nemo (fine-tune) or --from-scratch")
    if args.base and not args.base.is_file():
        sys.exit(f"asr_variants_ab: --base: file not found: {args.base}")
    for flag, path in (("--train", args.train), ("--dev", args.dev), ("--test", args.test),
                       ("--tokenizer", args.tokenizer / "tokenizer.model")):
        if not path.is_file():
            made_by = ("python tools/train_tokenizer.py --vocab-size 256" if flag == "--tokenizer"
                       else "python tools/make_manifest.py")
            sys.exit(f"asr_variants_ab: {flag}: not found: {path} (made by {made_by}, or pass {flag})")

    unknown = [v for v in args.variants if v not in VARIANTS]
    if unknown:
        sys.exit(f"asr_variants_ab: unknown variant(s) {', '.join(unknown)}; expected {', '.join(VARIANTS)}")
    args.config_name = args.config_name or ("fastconformer_small" if args.base else "fastconformer_tiny")
    args.out = args.out.resolve()
    start = time.time()
    results = []
    for i, variant in enumerate(args.variants, 1):
        print(f"asr_variants_ab: [{i}/{len(args.variants)}] {variant}", flush=True)
        results.append(run_variant(args, variant))
    if args.check_only:
        print(f"asr_variants_ab: length check done for {len(results)} variants")
        return 1 if any("error" in r for r in results) else 0
    write_text_atomic(args.out / "ab_results.json", json.dumps(results, indent=2) + "\n")
    table = format_table(results, args)
    write_text_atomic(args.out / "ab_table.md", table)
    print(table)
    failed = sum("error" in r for r in results)
    print(f"asr_variants_ab: {len(results) - failed}/{len(results)} variants trained in "
          f"{(time.time() - start) / 60:.1f} min; table in {args.out / 'ab_table.md'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
