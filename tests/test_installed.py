"""duet installed outside a checkout (``pip install .``, not editable): the library finds its bundled samples and
configs as package data, writes under the folder it runs in, never into the installed package, and answers a
bundled clip as the checkout does. Slow: the install and two model loads take about a minute."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
# What `pip install .` reads: the build settings, the readme they name, the packages and what pyproject.toml maps in
BUILD_INPUTS = ("pyproject.toml", "README.md", "duet", "slm", "samples", "configs")

# The library calls of tools/pipeline.py with explicit model paths (the ASR model from the bundled checkpoints),
# and where the config, the samples, the runs and the server's page are found, printed as one JSON line
PIPELINE_CALLS = """
import json, sys
from pathlib import Path
import duet, duet.foundation as foundation
from duet.pipeline import PipelineSettings, VoicePipeline
from duet.serving.routes import WEB_FOLDER
from slm.config import load_config, resolve_path

asr_model = foundation.SAMPLES_DIR / "checkpoints" / "fastconformer_tiny_base.nemo"
clip = sorted((foundation.SAMPLES_DIR / "LibriSpeech" / "test-clean").rglob("*.flac"))[0]
pipeline, _ = VoicePipeline.load(PipelineSettings(asr_model=asr_model, slm_model=Path(sys.argv[1])))
result = pipeline.run(clip)
config = load_config("slm_tiny_offline")
print(json.dumps({"package": duet.__file__, "checkout": str(foundation.CHECKOUT), "samples": str(foundation.SAMPLES_DIR),
                  "experiments": str(foundation.EXPERIMENTS), "slm_output": str(resolve_path(config.output_dir)),
                  "slm_data": str(resolve_path(config.data.source)), "clip": clip.name,
                  "web_page": str(WEB_FOLDER / "index.html"), "transcript": result.transcript, "response": result.response,
                  "error": result.error}))
"""


def files_under(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if "__pycache__" not in p.parts}


def run_calls(slm: Path, cwd: Path, pythonpath: Path | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DUET_PROJECT_DIR")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)  # ahead of the venv's editable entry for the checkout
    done = subprocess.run([sys.executable, "-c", PIPELINE_CALLS, str(slm)], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_installed_package_runs_the_pipeline_from_another_folder(tmp_path, tiny_slm_folder):
    source, site, work = tmp_path / "source", tmp_path / "site", tmp_path / "work"
    source.mkdir()
    for name in BUILD_INPUTS:  # a copy: pip builds in the tree it is given, and its build/ stays out of the checkout
        if (REPO_ROOT / name).is_dir():
            shutil.copytree(REPO_ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(REPO_ROOT / name, source / name)
    installed = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
                                "--no-compile", "--target", str(site), str(source)],
                               capture_output=True, text=True, timeout=600)
    assert installed.returncode == 0, installed.stderr[-3000:]
    work.mkdir()
    before = files_under(site)

    outside = run_calls(tiny_slm_folder, work, site)

    assert Path(outside["package"]).is_relative_to(site) and outside["checkout"] == "None"
    assert Path(outside["samples"]) == site / "duet" / "samples"
    assert Path(outside["experiments"]) == work.resolve() / "experiments"
    assert Path(outside["slm_output"]) == work.resolve() / "experiments" / "slm_tiny"
    assert Path(outside["slm_data"]) == site / "duet" / "samples" / "alpaca_sample.json"
    assert Path(outside["web_page"]).is_relative_to(site) and Path(outside["web_page"]).is_file()
    assert outside["error"] is None and outside["transcript"] and outside["response"] is not None
    assert files_under(site) == before  # nothing written into the installed package

    inside = run_calls(tiny_slm_folder, REPO_ROOT, None)
    assert Path(inside["package"]).is_relative_to(REPO_ROOT) and inside["checkout"] == str(REPO_ROOT)
    assert (outside["clip"], outside["transcript"], outside["response"]) == \
        (inside["clip"], inside["transcript"], inside["response"])
