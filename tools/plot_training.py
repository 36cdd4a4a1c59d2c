#!/usr/bin/env python
"""Plot a recipe run's training dynamics per epoch: train loss, val loss, best val loss so far, grad norm -> PNG.

Usage:
  python tools/plot_training.py experiments/fastconformer_tiny --out training.png

Reads <run dir>/csv_logs/metrics.csv written by nemo_recipes/finetune_ctc.py (Lightning's CSV logger;
a resumed run appends to it). Train loss is the mean of the steps logged in each epoch; gradient norm
is the epoch mean of the total L2 norm before clipping (logged by duet.asr.recipe.GradNormLogger).
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections import defaultdict
from pathlib import Path

from duet.errors import DuetError
from duet.foundation.errors import cli
from duet.foundation.files import save_png_atomic


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run_dir", type=Path, help="experiment folder of a finetune_ctc.py run")
    parser.add_argument("--out", type=Path, default=None, help="output PNG (default: <run_dir>/training.png)")
    return parser


def per_epoch_curves(metrics_csv: Path) -> dict[str, list[tuple[int, float]]]:
    """{curve name: [(epoch, value), ...]} from Lightning's metrics.csv."""
    sums: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    with open(metrics_csv, encoding="utf-8", newline="") as f:
        for row in csv.DictReader(f):
            if not row.get("epoch"):
                continue
            epoch = int(float(row["epoch"]))
            for key, curve in (("train_loss", "train loss"), ("val_loss", "val loss"), ("grad_norm_epoch", "grad norm")):
                if row.get(key):
                    sums[curve][epoch].append(float(row[key]))
    curves = {name: sorted((e, sum(v) / len(v)) for e, v in by_epoch.items()) for name, by_epoch in sums.items()}
    best, running = [], float("inf")
    for epoch, value in curves.get("val loss", []):
        running = min(running, value)
        best.append((epoch, running))
    curves["best val loss so far"] = best
    return curves


def plot_curves(curves: dict, title: str, out: Path) -> None:
    # pyplot takes ~3.5 s to import: --help and argument errors answer before it loads
    import matplotlib.pyplot as plt

    plt.switch_backend("Agg")  # files only: no display is needed or assumed

    fig, axes = plt.subplots(2, 2, figsize=(11, 7))
    for ax, name in zip(axes.flat, ("train loss", "val loss", "best val loss so far", "grad norm")):
        points = curves.get(name, [])
        if points:
            ax.plot([e for e, _ in points], [v for _, v in points], marker="o", markersize=3)
        else:
            ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes)
        ax.set(title=name, xlabel="epoch")
        ax.xaxis.set_major_locator(plt.MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    save_png_atomic(fig, out)


@cli
def main(argv=None) -> int:
    args = get_parser().parse_args(argv)
    metrics_csv = args.run_dir / "csv_logs" / "metrics.csv"
    if not metrics_csv.is_file():
        raise DuetError(f"{metrics_csv} not found (is {args.run_dir} a finetune_ctc.py run?)")
    curves = per_epoch_curves(metrics_csv)
    out = args.out or args.run_dir / "training.png"
    plot_curves(curves, args.run_dir.name, out)
    epochs = len(curves.get("train loss", []))
    best = curves["best val loss so far"][-1][1] if curves["best val loss so far"] else float("nan")
    print(f"plot_training: {epochs} epochs, best val loss {best:.4f} -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
