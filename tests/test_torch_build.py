"""The torch build tools/setup.sh installs (``python -m slm.choose_torch_build``), and the recipes' refusal to train
on the CPU of a GPU machine whose torch cannot use the GPUs, against fake ``nvidia-smi`` programs.

Each fake answers as the real one does: its header names the driver's CUDA version, ``--query-gpu=name,compute_cap``
lists the GPUs (a driver too old for that field fails it, exit 2, and answers only ``-L``), and a machine whose
driver is not loaded fails every call (exit 9).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from slm import torch_build
from slm.errors import SlmError

REPO_ROOT = Path(__file__).resolve().parent.parent

FAKE_NVIDIA_SMI = r"""#!/bin/bash
if [ -n "$FAKE_SMI_FAILS" ]; then
  echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."; exit 9
fi
case "$1" in
  --query-gpu=name,compute_cap)
    if [ -z "$FAKE_SMI_CAPS" ]; then echo 'Field "compute_cap" is not a valid field to query.'; exit 2; fi
    printf '%b' "$FAKE_SMI_CAPS" ;;
  -L) printf '%b' "$FAKE_SMI_LIST" ;;
  "") echo "| NVIDIA-SMI $FAKE_SMI_DRIVER   Driver Version: $FAKE_SMI_DRIVER   CUDA Version: $FAKE_SMI_CUDA     |" ;;
esac
"""

H100 = "NVIDIA H100 80GB HBM3, 9.0\n"
V100 = "Tesla V100-SXM2-16GB, 7.0\n"
RTX5090 = "NVIDIA GeForce RTX 5090, 12.0\n"
K80 = "Tesla K80, 3.7\n"
CU126 = f"torch==2.13.0+cu126 --extra-index-url {torch_build.TORCH_CU126_INDEX}"


@pytest.fixture
def fake_smi(tmp_path, monkeypatch):
    """Puts a fake nvidia-smi first on PATH; returns a function that sets what it answers."""
    folder = tmp_path / "bin"
    folder.mkdir()
    program = folder / "nvidia-smi"
    program.write_text(FAKE_NVIDIA_SMI)
    program.chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    for name in ("FAKE_SMI_FAILS", "FAKE_SMI_CAPS", "FAKE_SMI_LIST", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)

    def answer(caps: str = "", driver: str = "580.65.06", cuda: str = "13.0", fails: bool = False, listing: str = ""):
        monkeypatch.setenv("FAKE_SMI_CAPS", caps)
        monkeypatch.setenv("FAKE_SMI_DRIVER", driver)
        monkeypatch.setenv("FAKE_SMI_CUDA", cuda)
        monkeypatch.setenv("FAKE_SMI_LIST", listing)
        if fails:
            monkeypatch.setenv("FAKE_SMI_FAILS", "1")

    return answer


def run_torch_build(env_path: str | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, **({"PATH": env_path} if env_path else {})}
    return subprocess.run([sys.executable, "-m", "slm.choose_torch_build"], cwd=REPO_ROOT, env=env, capture_output=True,
                          text=True, timeout=60)


def test_a_machine_without_nvidia_smi_keeps_the_plain_pin(tmp_path):
    """A CPU machine: exactly the `pip install torch==2.13.0` the setup always ran (a CPU build from local disk)."""
    bare = tmp_path / "bare"
    bare.mkdir()
    done = run_torch_build(str(bare))  # a PATH without nvidia-smi
    assert done.returncode == 0, done.stderr
    assert done.stdout == "torch==2.13.0\n" and "CPU build" in done.stderr


@pytest.mark.parametrize("answers, expected", [
    ({"caps": H100}, "torch==2.13.0"),                                       # Hopper, CUDA 13 driver: PyPI's build
    ({"caps": H100 * 8}, "torch==2.13.0"),
    ({"caps": V100}, CU126),                                                 # Volta: CUDA 13 has no sm_70 kernels
    ({"caps": H100, "driver": "535.104.05", "cuda": "12.2"}, CU126),         # a CUDA 12 driver: PyPI's build can't run
    ({"caps": V100 * 4, "driver": "525.60.13", "cuda": "12.0"}, CU126),      # the oldest driver any build runs on
    ({"fails": True}, "torch==2.13.0"),                                      # no driver loaded: a CPU machine
], ids=["h100", "8xh100", "v100", "h100-driver-535", "4xv100-driver-525", "driver-not-loaded"])
def test_the_build_follows_the_driver_and_the_gpus(fake_smi, answers, expected):
    fake_smi(**answers)
    done = run_torch_build()
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == expected


@pytest.mark.parametrize("answers, message", [
    ({"caps": K80, "driver": "535.104.05", "cuda": "12.2"}, "Tesla K80 (compute 3.7) is older than any torch 2.13.0"),
    ({"caps": H100, "driver": "520.61.05", "cuda": "11.8"}, "runs CUDA 11.8 (NVIDIA H100 80GB HBM3 (compute 9.0)); "
                                                            "torch 2.13.0 needs CUDA 12: install NVIDIA driver 525.60.13"),
    ({"listing": "GPU 0: Tesla P100-PCIE-16GB (UUID: GPU-5d0c)\n", "driver": "470.82.01", "cuda": "11.4"},
     "runs CUDA 11.4 (Tesla P100-PCIE-16GB)"),                               # too old to know compute_cap
    ({"caps": RTX5090, "driver": "570.124.06", "cuda": "12.8"}, "NVIDIA GeForce RTX 5090 (compute 12.0) needs the "
                                                                "CUDA 13.0 build, which needs driver 580.65.06"),
    ({"caps": V100 + RTX5090}, "no single build covers Tesla V100-SXM2-16GB (compute 7.0) (CUDA 12.6 build only) "
                               "and NVIDIA GeForce RTX 5090"),
], ids=["k80", "driver-520", "driver-470", "blackwell-driver-570", "v100-with-blackwell"])
def test_no_fitting_build_is_one_line_naming_what_to_upgrade(fake_smi, answers, message):
    fake_smi(**answers)
    done = run_torch_build()
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("choose_torch_build: error: no torch 2.13.0 build runs here: ")
    assert done.stderr.count("\n") == 1 and message in done.stderr


def test_help_is_the_usage_docstring():
    done = subprocess.run([sys.executable, "-m", "slm.choose_torch_build", "--help"], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "python -m slm.choose_torch_build" in done.stdout and "CUDA 12.6" in done.stdout


def test_setup_installs_what_torch_build_chooses():
    """setup.sh takes torch's pip arguments from the module (no pin of its own that could disagree with it)."""
    commands = [line for line in (REPO_ROOT / "tools" / "setup.sh").read_text().splitlines()
                if not line.lstrip().startswith("#")]
    assert any('torch_pip_args=$("$VENV/bin/python" -m slm.choose_torch_build)' in line for line in commands)
    assert any('pip install -q $torch_pip_args' in line for line in commands)
    assert not any("torch==" in line for line in commands)


# --- the recipes: GPUs that nvidia-smi sees and torch does not ---------------------------------------------------

def test_the_slm_recipe_refuses_gpus_torch_cannot_use(fake_smi, tmp_path, capsys, monkeypatch):
    """torch here cannot use a GPU of that driver (a CPU build from the local wheel mirror, or PyPI's CUDA 13.0 build
    on a fresh machine): with a GPU in nvidia-smi, slm/finetune.py stops with one line instead of training on the
    CPU; hiding the GPUs (CUDA_VISIBLE_DEVICES=) runs on the CPU as asked."""
    from slm import finetune

    fake_smi(caps=V100 * 4, driver="535.104.05", cuda="12.2")
    out = tmp_path / "runs" / "run"
    assert finetune.main(["--config-name", "slm_tiny_offline", f"output_dir={out}", "train.max_steps=1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith("finetune: error: nvidia-smi lists 4 x Tesla V100-SXM2-16GB (compute 7.0) but torch ")
    build = torch_build.installed_build_name()
    assert f"cannot use them ({build}, the driver runs CUDA 12.2): run bash tools/setup.sh" in err
    assert not out.parent.exists()  # stopped before anything was written
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    torch_build.require_torch_to_see_the_gpus()  # hidden on purpose: the CPU is what was asked for


def test_the_asr_recipe_refuses_gpus_torch_cannot_use(fake_smi, monkeypatch):
    pytest.importorskip("nemo.collections.asr")
    from omegaconf import OmegaConf

    from duet.asr import recipe

    fake_smi(caps=H100, driver="535.104.05", cuda="12.2")
    trainer = OmegaConf.create({"accelerator": None, "devices": None, "num_nodes": 1, "strategy": None,
                                "precision": None, "sync_batchnorm": None})
    # slm's error (the recipe's cli reports every ToolError in one line, DuetError and SlmError alike)
    with pytest.raises(torch_build.NoTorchBuild,
                       match=r"^nvidia-smi lists NVIDIA H100 80GB HBM3 \(compute 9.0\) but torch .* cannot use them "
                             + re.escape(f"({torch_build.installed_build_name()}, the driver runs CUDA 12.2)")) \
            as refused:
        recipe.resolve_trainer_config(trainer)
    assert isinstance(refused.value, SlmError)
    # asking for the CPU, or hiding the GPUs, is a choice: no refusal
    assert recipe.resolve_trainer_config(OmegaConf.merge(trainer, {"accelerator": "cpu"}))["accelerator"] == "cpu"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert recipe.resolve_trainer_config(trainer)["accelerator"] == "cpu"
