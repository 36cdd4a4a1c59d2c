"""tools/plot_features.py and tools/plot_training.py write their PNGs from real inputs."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from tests.asr_helpers import REPO, build_micro_model, sample_utterances, train_tokenizer
from tests.script_helpers import load_script


def load_tool(name: str):
    return load_script(REPO / "tools" / f"{name}.py")


def test_features_from_a_saved_model_use_its_own_spec_augmentation(tmp_path):
    plot_features = load_tool("plot_features")
    utterances = sample_utterances(30)
    model = build_micro_model(train_tokenizer([u["text"] for u in utterances], tmp_path / "tok", 32))
    model.save_to(str(tmp_path / "micro.nemo"))
    pre_cfg, preprocessor, spec_augment = plot_features.load_modules(tmp_path / "micro.nemo", None)
    assert spec_augment is not None
    out = tmp_path / "features.png"
    assert plot_features.main(["--model", str(tmp_path / "micro.nemo"), "--audio", utterances[0]["audio_filepath"],
                               "--out", str(out)]) == 0
    assert out.stat().st_size > 10_000


def test_training_dynamics_from_a_metrics_csv(tmp_path):
    plot_training = load_tool("plot_training")
    (tmp_path / "csv_logs").mkdir()
    fields = ["epoch", "step", "train_loss", "val_loss", "grad_norm_epoch"]
    with open(tmp_path / "csv_logs" / "metrics.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        for epoch in range(4):
            for step in range(3):
                writer.writerow({"epoch": epoch, "step": epoch * 3 + step, "train_loss": 5 - epoch - 0.1 * step})
            writer.writerow({"epoch": epoch, "step": epoch * 3 + 2, "val_loss": 4.5 - epoch + 0.5 * (epoch == 2),
                             "grad_norm_epoch": float(np.exp(-epoch))})
    out = tmp_path / "training.png"
    assert plot_training.main([str(tmp_path), "--out", str(out)]) == 0
    assert out.stat().st_size > 10_000
