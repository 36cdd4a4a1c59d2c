"""The design's four commands, typed exactly so and in that order on a fresh copy of the repository:

    python tools/make_manifest.py
    python nemo_recipes/finetune_ctc.py --config-name fastconformer_small
    python slm/finetune.py
    python tools/pipeline.py audio.flac

Each either runs or stops with one line naming the command to run first (or instead), and running that command
lets the chain go on. The two trainings are cut short with their own overrides (trainer.max_steps=2, and the
offline preset's train.max_steps=2 with a small evaluation); the last command is also run on a real file with
the models the chain made, as its error line suggests. About 2-3 minutes on 2 cores, mostly imports.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parent.parent
SAMPLE_FILE = "samples/LibriSpeech/test-clean/7001/700101/7001-700101-0000.flac"


@pytest.fixture(scope="module")
def clone(tmp_path_factory) -> Path:
    """What a fresh clone holds: code, configs and the bundled sample; no manifests, tokenizers or models."""
    if not (REPO / "samples" / "LibriSpeech").is_dir():
        pytest.skip("bundled sample missing")
    root = tmp_path_factory.mktemp("clone")
    for folder in ("duet", "slm", "tools", "nemo_recipes", "configs"):
        shutil.copytree(REPO / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", root)
    (root / "samples").mkdir()
    for sample in ("LibriSpeech", "alpaca_sample.json"):  # read only: linked, not copied
        (root / "samples" / sample).symlink_to(REPO / "samples" / sample)
    return root


def typed(clone: Path, command: str, *overrides: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """``command`` as a user types it in the clone (``python`` being this interpreter, as in the README's activated
    venv; the clone's code first)."""
    words = shlex.split(command)
    assert words[0] == "python", command
    # an unroutable proxy: the hub is out of reach even on a machine with internet, at once
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", os.defpath)])
    env = {**os.environ, "PATH": path, "PYTHONPATH": str(clone), "HTTPS_PROXY": "http://127.0.0.1:9",
           "HTTP_PROXY": "http://127.0.0.1:9", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    return subprocess.run([sys.executable, *words[1:], *overrides], cwd=clone, env=env, capture_output=True,
                          text=True, timeout=timeout)


def one_line_error(proc: subprocess.CompletedProcess, prog: str) -> str:
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert proc.stdout == "" and "Traceback" not in proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{prog}: error: "), proc.stderr[-3000:]
    return lines[0]


def test_the_four_commands_run_or_name_the_command_to_run_first(clone):
    # 1. manifests of the bundled sample
    proc = typed(clone, "python tools/make_manifest.py")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (clone / "manifests" / "train-clean.json").is_file() and (clone / "manifests" / "dev-clean.json").is_file()

    # 2. the recipe's default tokenizer is not there yet: the line names the command that makes it
    line = one_line_error(typed(clone, "python nemo_recipes/finetune_ctc.py --config-name fastconformer_small"),
                          "finetune_ctc")
    first = re.search(r"\(run (python [^()]+?) first\)$", line)
    assert first and "model.tokenizer.dir" in line, line
    assert first[1] == "python tools/train_tokenizer.py"
    proc = typed(clone, first[1])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (clone / "tokenizers" / "spe_bpe_v1024" / "tokenizer.model").is_file()
    proc = typed(clone, "python nemo_recipes/finetune_ctc.py --config-name fastconformer_small", "trainer.max_steps=2",
                 "trainer.enable_progress_bar=false")
    assert proc.returncode == 0, proc.stderr[-3000:]
    asr_model = clone / "experiments" / "fastconformer_small" / "fastconformer_small.nemo"
    assert asr_model.is_file() and "finetune_ctc: fastconformer_small done" in proc.stdout
    assert "Config:\n" not in proc.stdout + proc.stderr  # the resolved config is in the run folder
    assert (asr_model.parent / "resolved_config.yaml").is_file()
    import torch

    if not torch.cuda.is_available():
        cost = [line for line in proc.stdout.splitlines() if line.startswith("finetune_ctc: no GPU:")]
        assert len(cost) == 1 and "12.8 M-parameter model" in cost[0] and "trainer.max_steps=N" in cost[0], proc.stdout

    # 3. GPT-2 from the hub is out of reach here: the line names the offline preset to run instead
    line = one_line_error(typed(clone, "python slm/finetune.py"), "finetune")
    instead = re.search(r"run the offline preset instead: (python .+)$", line)
    assert instead and instead[1] == "python slm/finetune.py --config-name slm_tiny_offline", line
    proc = typed(clone, instead[1], "train.max_steps=2", "data.max_examples=400", "eval.before_training=false",
                 "eval.num_generate=4", "eval.max_new_tokens=8", "eval.bertscore_model=none")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (clone / "experiments" / "slm_tiny" / "config.json").is_file()

    # 4. audio.flac is not there, nor are the demo's models: one line before any model loads, suggesting the
    # models the chain made
    line = one_line_error(typed(clone, "python tools/pipeline.py audio.flac"), "pipeline")
    assert line.startswith("pipeline: error: no such file: audio.flac; --asr-model ")
    asr = re.search(r"or pass (--asr-model \S+)\)", line)
    slm = re.search(r"or pass (--slm-model \S+)\)", line)
    assert asr and asr[1] == "--asr-model experiments/fastconformer_small/fastconformer_small.nemo", line
    assert slm and slm[1] == "--slm-model experiments/slm_tiny", line
    proc = typed(clone, f"python tools/pipeline.py {SAMPLE_FILE} {asr[1]} {slm[1]}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout.splitlines()
    assert out[0] == "decoding: greedy (default: no experiments/fastconformer_small/decoding.json)"
    assert any(line.startswith("  transcript: ") for line in out) and "pipeline: 1 file(s), 0 failed" in out
    assert "NeMo" not in proc.stdout + proc.stderr  # its log lines are in the log
    assert "NeMo" in (clone / "experiments" / "logs" / "pipeline.log").read_text()
