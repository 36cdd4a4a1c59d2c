"""Loopback rehearsal of the SLM real path: configs/slm_gpt2_alpaca.yaml as shipped ("gpt2", "tatsu-lab/alpaca"),
a full-size 124M GPT-2 with random weights, killed mid-training, resumed by the same command (three checkpoints in
all, two kept at a time), then evaluated.

No hub is reachable here and none ships GPT-2 weights or Alpaca, so the stand-ins sit where a machine that has run
the config once keeps them, under HF_HOME: the hub cache (models--gpt2/snapshots/<rev> + refs/main) that
``from_pretrained("gpt2")`` resolves, and the datasets cache (tatsu-lab___alpaca/default/0.0.0/<rev>) that
``datasets.load_dataset("tatsu-lab/alpaca")`` falls back to without the hub (datasets 5 does not read a dataset
repo's hub cache offline; it needs the prepared Arrow files). HF_ENDPOINT points at a closed 127.0.0.1 port, so
slm/finetune.py's own probe finds the hub unreachable and switches the libraries to their caches, the branch a
GPU box with a warm cache and no hub takes; nothing beyond 127.0.0.1 is contacted.
"""

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from slm.data import format_alpaca_example

REVISION = "7c5f5b8d3a1e4c2b9f0a6d8e1b3c5a7f9e2d4c6b"  # any 40-hex commit: refs/main names the snapshot
HUB_VARIABLES = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_HUB_CACHE", "HF_DATASETS_CACHE",
                 "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")
TASKS = ["Name a colour of the sky.", "Give a synonym of quick.", "Translate the word to French.",
         "Add the two numbers.", "Summarise the sentence.", "Write a short greeting."]


def alpaca_rows(count: int) -> list[dict]:
    """Alpaca-format rows, half of them with an input, as tatsu-lab/alpaca has."""
    return [{"instruction": TASKS[i % len(TASKS)], "input": f"item {i}" if i % 2 else "",
             "output": f"Answer {i}: " + " ".join(["a short reply"] * (1 + i % 3))} for i in range(count)]


def cache_gpt2_stand_in(hub_cache: Path, texts: list[str]) -> None:
    """GPT2Config() (124M, 50257 positions in the embedding) with random weights and a small byte-level BPE saved
    as a GPT-2 tokenizer folder, laid out as the hub cache lays out a downloaded "gpt2"."""
    from transformers import GPT2Config, GPT2LMHeadModel, GPT2Tokenizer

    from slm.modeling import train_bpe_tokenizer

    repo = hub_cache / "models--gpt2"
    snapshot = repo / "snapshots" / REVISION
    bpe_files = hub_cache.parent / "bpe"
    bpe_files.mkdir(parents=True)
    train_bpe_tokenizer(texts, 400).backend_tokenizer.model.save(str(bpe_files))  # vocab.json + merges.txt
    tokenizer = GPT2Tokenizer.from_pretrained(str(bpe_files))
    tokenizer.save_pretrained(str(snapshot))
    for name in ("vocab.json", "merges.txt"):  # the hub's gpt2 has them beside tokenizer.json
        (snapshot / name).write_bytes((bpe_files / name).read_bytes())
    # GPT-2's own special-token ids are 50256; this tokenizer's <|endoftext|> is elsewhere
    config = GPT2Config(bos_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id)
    GPT2LMHeadModel(config).save_pretrained(str(snapshot))
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(REVISION)


def cache_alpaca_stand_in(datasets_cache: Path, rows: list[dict], scratch: Path) -> None:
    """The prepared Arrow files that a first ``load_dataset("tatsu-lab/alpaca")`` leaves in the datasets cache,
    built by datasets' own JSON builder and moved to the folder the hub dataset's builder writes."""
    from datasets.packaged_modules.json.json import Json

    source = scratch / "alpaca_data.json"
    source.write_text(json.dumps(rows))
    builder = Json(cache_dir=str(scratch / "build"), dataset_name="alpaca", config_name="default",
                   data_files={"train": str(source)}, hash=REVISION)
    builder.download_and_prepare()
    target = datasets_cache / "tatsu-lab___alpaca" / "default" / "0.0.0"
    target.mkdir(parents=True)
    Path(builder.cache_dir).rename(target / REVISION)


def closed_loopback_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture(scope="module")
def warm_hf_home(tmp_path_factory) -> Path:
    hf_home = tmp_path_factory.mktemp("hf_home")
    rows = alpaca_rows(40)
    cache_gpt2_stand_in(hf_home / "hub", [format_alpaca_example(row) for row in rows])
    cache_alpaca_stand_in(hf_home / "datasets", rows, tmp_path_factory.mktemp("alpaca_build"))
    return hf_home


def wait_for_checkpoint(run: subprocess.Popen, checkpoint: Path, timeout: float) -> None:
    """Until the Trainer has finished writing ``checkpoint`` (its trainer_state.json comes last)."""
    deadline = time.time() + timeout
    while not (checkpoint / "trainer_state.json").is_file():
        assert run.poll() is None, f"finetune.py exited ({run.returncode}) before {checkpoint.name}"
        assert time.time() < deadline, f"no {checkpoint.name} after {timeout:.0f} s"
        time.sleep(0.2)


@pytest.mark.slow
def test_gpt2_alpaca_config_killed_resumed_and_evaluated(python, repo_root, tmp_path, warm_hf_home):
    env = {key: value for key, value in os.environ.items() if key not in HUB_VARIABLES}
    env.update(HF_HOME=str(warm_hf_home), HF_ENDPOINT=f"http://127.0.0.1:{closed_loopback_port()}",
               OMP_NUM_THREADS="1")  # one core: the tests share the machine
    out = tmp_path / "gpt2_alpaca"
    command = [python, "slm/finetune.py", f"output_dir={out}", "data.max_length=64", "train.batch_size=2",
               "train.max_steps=6", "train.save_steps=2", "train.eval_steps=2", "train.logging_steps=1",
               "eval.batch_size=2", "eval.num_generate=2", "eval.max_new_tokens=4", "eval.bertscore_model=none",
               "eval.samples=1", "--log", str(tmp_path / "library.log")]
    partial = out.parent / f".{out.name}.partial"
    first_log = tmp_path / "first_run.log"
    with open(first_log, "w") as log_file:
        first = subprocess.Popen(command, cwd=repo_root, env=env, stdout=log_file, stderr=subprocess.STDOUT)
        try:
            wait_for_checkpoint(first, partial / "checkpoints" / "checkpoint-2", timeout=240)
        finally:
            first.send_signal(signal.SIGKILL)  # a preempted job: no clean-up code runs
            first.wait()
    first_text = first_log.read_text()
    assert "124.44 M parameters" in first_text, first_text[-3000:]
    # set by finetune.py's probe (the environment did not); huggingface_hub says so in the library lines (--log)
    assert "(offline mode is enabled)" in (tmp_path / "library.log").read_text()
    assert not out.exists() and (partial / "finetune_config.yaml").is_file()

    resumed = subprocess.run(command, cwd=repo_root, env=env, capture_output=True, text=True, timeout=300)
    (tmp_path / "resumed_run.log").write_text(resumed.stdout + resumed.stderr)  # kept by pytest for a post-mortem
    assert resumed.returncode == 0, (resumed.stdout + resumed.stderr)[-3000:]
    assert "resuming" in resumed.stdout and "from checkpoint-2" in resumed.stdout
    assert "step 3/6" in resumed.stdout and "step 2/6" not in resumed.stdout
    # train.save_total_limit's default (2): checkpoint-2 went when checkpoint-6 was written, the rest at the end
    assert "removing the checkpoints checkpoint-4, checkpoint-6:" in resumed.stdout
    assert "evaluating the starting model" not in resumed.stdout  # its scores were kept from the first run
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["train_steps"] == 6 and metrics["parameters"] == 124_439_808
    assert set(metrics) >= {"before", "after"} and not partial.exists() and not (out / "checkpoints").exists()
    saved_config = (out / "finetune_config.yaml").read_text()
    assert "name_or_path: gpt2" in saved_config and "source: tatsu-lab/alpaca" in saved_config

    evaluated = subprocess.run([python, "slm/evaluate_slm.py", str(out), "--num-generate", "2", "--max-new-tokens", "4",
                                "--bertscore", "none"], cwd=repo_root, env=env, capture_output=True, text=True,
                               timeout=300)
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    summary = json.loads((out / "eval" / "eval_summary.json").read_text())
    assert "tatsu-lab/alpaca" in summary["eval"]["data"]
