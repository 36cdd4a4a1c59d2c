"""finetune.py: shipped configs, user errors as one line, hub-unreachable hint, a short run that learns."""

import json
import os
import subprocess
from pathlib import Path

import pytest

from duet.foundation import python_command
from slm import finetune
from slm.config import ConfigError, load_config


def test_shipped_configs_load_with_report_hyperparameters():
    real = load_config("slm_gpt2_alpaca")
    assert real.model.name_or_path == "gpt2" and real.data.source == "tatsu-lab/alpaca"
    t = real.train
    assert (t.learning_rate, t.weight_decay, t.batch_size, t.epochs) == (5e-5, 0.1, 8, 5)
    # sized for a GPU: 52,002 Alpaca rows x 0.85 x 5 epochs / batch 8 = 27,626 steps; the report's 5 meant ~5,500
    # evaluations, each one a stop of every GPU
    assert 40 <= 27_626 // t.eval_steps <= 100 and t.save_total_limit == 2 and t.ddp_timeout > 1800
    assert list(real.data.split) == [0.85, 0.10, 0.05] and real.data.max_length == 1024 and real.model.dropout == 0.0
    tiny = load_config("slm_tiny_offline")
    assert tiny.model.name_or_path is None and tiny.data.source == "samples/alpaca_sample.json"
    assert tiny.train.weight_decay == 0.1  # inherited through the defaults list


@pytest.mark.parametrize("override, message", [("train.epochz=2", "Key 'epochz' is unknown"),
                                               ("train.epochs=five", "train.epochs: expected a number"),
                                               ("+train.new=1", "bad override"),
                                               ("data.mask_prompt=3", "expected true/false")])
def test_bad_overrides_are_refused(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config("slm_tiny_offline", [override])


def test_config_error_is_one_line_without_traceback(capsys):
    assert finetune.main(["--config-name", "slm_tiny_offline", "train.epochz=2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and "epochz" in err


@pytest.mark.parametrize("overrides", [[], ["data.source=samples/alpaca_sample.json"]])
def test_unreachable_hub_names_offline_preset(overrides, tmp_path, capsys, monkeypatch):
    """No hub here (conftest sets HF_HUB_OFFLINE): dataset or model load fails with one hint line."""
    monkeypatch.setattr(finetune, "hub_reachable", lambda timeout=3.0: False)
    assert finetune.main([*overrides, f"output_dir={tmp_path}/run"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "Traceback" not in err  # the hint alone, no config dump before it
    assert f"{python_command('slm/finetune.py', '--config-name', 'slm_tiny_offline')}\n" in err
    assert ("tatsu-lab/alpaca" in err) if not overrides else ("'gpt2'" in err)
    assert not (tmp_path / "run").exists() and not list(tmp_path.iterdir())  # nothing half-written


def test_short_training_run_lowers_validation_loss(tmp_path):
    """A 2-layer model on 300 bundled rows for 60 steps on prompt + answer, through the real Trainer path."""
    out = tmp_path / "tiny"
    assert finetune.main(["--config-name", "slm_tiny_offline", f"output_dir={out}", "data.max_examples=300",
                          "model.scratch.n_layer=2", "model.scratch.n_embd=64", "model.scratch.n_head=2",
                          "model.scratch.vocab_size=600", "data.mask_prompt=false", "train.max_steps=60", "train.eval_steps=30",
                          "train.logging_steps=30", "eval.num_generate=4", "eval.max_new_tokens=16",
                          "eval.bertscore_model=none"]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["train_steps"] == 60
    assert metrics["after"]["masked_loss"] < metrics["before"]["masked_loss"] - 1.0
    assert metrics["after"]["unmasked_loss"] < metrics["before"]["unmasked_loss"] - 1.0
    assert {"assistant_rows", "assistant_kind", "assistant_slots", "assistant_on_topic"} <= set(metrics["after"])
    history = [json.loads(line) for line in (out / "log_history.jsonl").read_text().splitlines()]
    assert [h["step"] for h in history if "eval_loss" in h] == [30, 60]
    for name in ("model.safetensors", "config.json", "tokenizer.json", "finetune_config.yaml", "finetune.log",
                 "eval_summary.json", "generations_before.jsonl", "generations_after.jsonl", "bleu_n.png",
                 "bleu_vs_rouge.png"):
        assert (out / name).is_file(), name
    assert not (out / "checkpoints").exists()


def test_replayed_english_joins_the_training_rows_and_a_missing_file_is_one_line(tmp_path, capsys):
    text = tmp_path / "english.txt"
    text.write_text("".join(f"the {word} sat on the mat\n" for word in ("cat", "dog", "bird", "fox") * 10))
    tiny = ["--config-name", "slm_tiny_offline", "data.max_examples=60", "model.scratch.n_layer=1",
            "model.scratch.n_embd=32", "model.scratch.n_head=2", "model.scratch.vocab_size=400", "train.max_steps=3",
            "train.eval_steps=3", "eval.before_training=false", "eval.num_generate=2", "eval.max_new_tokens=4",
            "eval.bertscore_model=none", "data.replay_per_row=0.5"]
    out = tmp_path / "replay"
    assert finetune.main([*tiny, f"output_dir={out}", f"data.replay_text={text}"]) == 0
    # 60 rows split 85 / 10 / 5: 51 training rows, so 26 sentences
    assert f"replay: 26 sentences of {text} among the 51 training rows" in (out / "finetune.log").read_text()
    metrics = json.loads((out / "metrics.json").read_text())
    assert (metrics["train_rows"], metrics["replay_rows"]) == (51, 26)
    capsys.readouterr()
    missing = tmp_path / "missing"
    assert finetune.main([*tiny, f"output_dir={missing}", f"data.replay_text={tmp_path / 'none.txt'}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "data.replay_text:" in err[0] and "none.txt does not exist" in err[0]
    assert not missing.exists() and not finetune.partial_dir(missing).exists()
    assert finetune.main([*tiny, f"output_dir={missing}", "data.replay_text=null"]) == 2
    assert "data.replay_per_row=0.5 needs data.replay_text" in capsys.readouterr().err


@pytest.mark.integration
def test_offline_preset_entry_point_and_generate(python, repo_root, tmp_path):
    out = tmp_path / "slm_tiny"
    run = subprocess.run([python, "slm/finetune.py", "--config-name", "slm_tiny_offline", f"output_dir={out}",
                          "train.max_steps=20", "train.eval_steps=10", "eval.num_generate=8",
                          "eval.max_new_tokens=16", "eval.bertscore_model=none"],
                         cwd=repo_root, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "done in" in run.stdout and "val masked loss" in run.stdout
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["after"]["masked_loss"] < metrics["before"]["masked_loss"]
    gen = subprocess.run([python, "slm/generate.py", str(out), "set a timer for ten minutes", "--max-new-tokens", "8"],
                         cwd=repo_root, capture_output=True, text=True, timeout=300)
    assert gen.returncode == 0 and gen.stdout.strip(), gen.stderr[-2000:]
    help_text = subprocess.run([python, "slm/finetune.py", "--help"], cwd=repo_root, capture_output=True, text=True)
    assert help_text.stdout.lstrip().startswith("usage:") and "Usage:" in help_text.stdout


@pytest.mark.slow
def test_two_process_torchrun_on_cpu(python, repo_root, tmp_path):
    """The HF Trainer's DDP through torchrun (gloo on CPU): both ranks train, rank 0 alone evaluates and writes."""
    out = tmp_path / "ddp"
    torchrun = Path(python).parent / "torchrun"
    run = subprocess.run([str(torchrun), "--nproc_per_node", "2", "slm/finetune.py", "--config-name", "slm_tiny_offline",
                          f"output_dir={out}", "train.max_steps=40", "train.eval_steps=40", "eval.num_generate=8",
                          "eval.max_new_tokens=16", "eval.bertscore_model=none"],
                         cwd=repo_root, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert run.returncode == 0, run.stderr[-2000:]
    log = run.stdout + run.stderr
    assert log.count("evaluating the starting model") == 1 and log.count("evaluating the fine-tuned model") == 1
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["train_steps"] == 40
    assert metrics["after"]["masked_loss"] < metrics["before"]["masked_loss"] - 1.0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ddp"]  # rank 1 left no partial folder


TINY_RUN = ["data.max_examples=120", "model.scratch.n_layer=1", "model.scratch.n_embd=32", "model.scratch.n_head=2",
            "model.scratch.vocab_size=400", "train.max_steps=12", "train.eval_steps=6", "train.logging_steps=6",
            "train.save_steps=4", "eval.num_generate=2", "eval.max_new_tokens=4", "eval.bertscore_model=none"]


class _StopAtStep(Exception):
    pass


def _stop_training_at(monkeypatch, step: int) -> None:
    """Make the next run die at ``step`` the way a killed job would: mid-training, after its checkpoints."""
    make_progress = finetune.make_progress_callback

    def progress_then_stop():
        callback = make_progress()

        def on_step_end(args, state, control, **kwargs):
            if state.global_step == step:
                raise _StopAtStep(step)

        callback.on_step_end = on_step_end
        return callback

    monkeypatch.setattr(finetune, "make_progress_callback", progress_then_stop)


def test_a_stopped_run_keeps_its_folder_and_resumes_from_its_last_checkpoint(tmp_path, monkeypatch):
    out = tmp_path / "run"
    args = ["--config-name", "slm_tiny_offline", f"output_dir={out}", *TINY_RUN]
    with monkeypatch.context() as patch:
        _stop_training_at(patch, 9)
        with pytest.raises(_StopAtStep):
            finetune.main(args)
    partial = finetune.partial_dir(out)
    assert not out.exists() and finetune.last_checkpoint(partial).name == "checkpoint-8"
    assert (partial / "before.json").is_file()

    with pytest.raises(finetune.ResumeConflict, match="another config"):
        finetune.run(load_config("slm_tiny_offline", [f"output_dir={out}", *TINY_RUN, "train.learning_rate=1e-4"]))
    assert partial.is_dir()  # a refused resume keeps the stopped run

    assert finetune.main(args) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["train_steps"] == 12 and not partial.exists() and not (out / "before.json").exists()
    log_text = (out / "finetune.log").read_text()
    assert "resuming" in log_text and "checkpoint-8" in log_text
    first_run, resumed_run = log_text.split("resuming", 1)  # one log, continued by the resumed run
    assert "step 6/12" in first_run and "step 6/12" not in resumed_run and "step 12/12" in resumed_run
    history = [json.loads(line) for line in (out / "log_history.jsonl").read_text().splitlines()]
    assert [h["step"] for h in history if "eval_loss" in h] == [6, 12]
    assert "before" in metrics and "after" in metrics


def test_checkpoints_are_bounded_while_training_and_removed_when_finished(tmp_path, monkeypatch):
    """train.save_total_limit (default 2) keeps the newest checkpoints only: a GPT-2 124M checkpoint with its optimiser
    state is ~1.5 GB, and keeping all of them filled the disk. A finished run keeps none (its saved model replaces them)."""
    out = tmp_path / "run"
    args = ["--config-name", "slm_tiny_offline", f"output_dir={out}", *TINY_RUN, "train.save_steps=2"]
    with monkeypatch.context() as patch:
        _stop_training_at(patch, 9)
        with pytest.raises(_StopAtStep):
            finetune.main(args)
    checkpoints = finetune.partial_dir(out) / "checkpoints"
    assert sorted(p.name for p in checkpoints.iterdir()) == ["checkpoint-6", "checkpoint-8"]

    assert finetune.main(args) == 0
    assert not (out / "checkpoints").exists() and (out / "model.safetensors").is_file()
    assert "removing the checkpoints checkpoint-10, checkpoint-12" in (out / "finetune.log").read_text()


def test_resume_passes_over_a_checkpoint_whose_save_was_killed(tmp_path):
    """A job killed while the Trainer writes checkpoint-4 leaves the folder without its trainer_state.json
    (written last); resuming must start from checkpoint-2, not crash on the half-written one."""
    checkpoints = tmp_path / "checkpoints"
    for step, complete in ((2, True), (4, False)):
        folder = checkpoints / f"checkpoint-{step}"
        folder.mkdir(parents=True)
        (folder / "model.safetensors").write_bytes(b"")
        if complete:
            (folder / "trainer_state.json").write_text("{}")
    assert finetune.last_checkpoint(tmp_path) == checkpoints / "checkpoint-2"
    (checkpoints / "checkpoint-2" / "trainer_state.json").unlink()
    assert finetune.last_checkpoint(tmp_path) is None


def test_the_model_is_saved_before_the_final_evaluation(tmp_path, monkeypatch):
    out = tmp_path / "run"
    calls = []
    real_evaluate = finetune_evaluation_module().evaluate_model

    def evaluate_then_fail_after_training(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:  # the "after" evaluation
            raise RuntimeError("evaluation broke")
        return real_evaluate(*args, **kwargs)

    monkeypatch.setattr(finetune_evaluation_module(), "evaluate_model", evaluate_then_fail_after_training)
    with pytest.raises(RuntimeError, match="evaluation broke"):
        finetune.main(["--config-name", "slm_tiny_offline", f"output_dir={out}", *TINY_RUN, "train.save_steps=null"])
    partial = finetune.partial_dir(out)
    assert (partial / "model.safetensors").is_file() and (partial / "config.json").is_file()


def finetune_evaluation_module():
    import slm.evaluation

    return slm.evaluation


def test_the_starting_model_is_scored_after_the_trainer_exists_and_every_rank_waits_for_it(tmp_path, monkeypatch):
    """Under torchrun the other ranks wait while rank 0 scores the starting model; that wait must come after the
    Trainer (and so the process group) exists, at an explicit barrier under train.ddp_timeout, not inside the
    group's 30-minute default."""
    import accelerate
    import transformers

    events = []
    real_init, real_wait = transformers.Trainer.__init__, accelerate.Accelerator.wait_for_everyone
    real_evaluate = finetune_evaluation_module().evaluate_model

    def init(self, *args, **kwargs):
        events.append(("trainer", kwargs["args"].ddp_timeout))
        real_init(self, *args, **kwargs)

    def wait(self):
        events.append("wait")
        real_wait(self)

    def evaluate(*args, **kwargs):
        events.append("evaluate")
        return real_evaluate(*args, **kwargs)

    monkeypatch.setattr(transformers.Trainer, "__init__", init)
    monkeypatch.setattr(accelerate.Accelerator, "wait_for_everyone", wait)
    monkeypatch.setattr(finetune_evaluation_module(), "evaluate_model", evaluate)
    assert finetune.main(["--config-name", "slm_tiny_offline", f"output_dir={tmp_path / 'run'}", *TINY_RUN,
                          "train.save_steps=null", "train.ddp_timeout=7200"]) == 0
    assert events[:3] == [("trainer", 7200), "evaluate", "wait"]


def test_hub_probe_goes_through_the_proxy(monkeypatch):
    """A machine that reaches the hub only through HTTP(S)_PROXY is online; the probe used to open a raw
    socket to the hub and called it unreachable."""
    import http.server
    import threading

    class Proxy(http.server.BaseHTTPRequestHandler):
        def do_HEAD(self):
            self.send_response(200 if self.path.startswith("http://hub.invalid") else 502)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("HF_ENDPOINT", "http://hub.invalid")
        for name in ("NO_PROXY", "no_proxy"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{server.server_port}")
        monkeypatch.setenv("http_proxy", f"http://127.0.0.1:{server.server_port}")
        assert finetune.hub_reachable(timeout=5)
        monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # nothing listens: unreachable, at once
        monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")
        assert not finetune.hub_reachable(timeout=5)
    finally:
        server.shutdown()


def test_split_digits_is_refused_for_the_scratch_model_in_one_line(tmp_path, capsys):
    assert finetune.main(["--config-name", "slm_tiny_offline", "model.split_digits=true",
                          f"output_dir={tmp_path}/run"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "model.split_digits is for a pretrained tokenizer" in err
    assert not (tmp_path / "run").exists() and not list(tmp_path.iterdir())  # nothing half-written
