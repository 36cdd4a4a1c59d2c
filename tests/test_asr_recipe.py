"""NeMo CTC recipe (nemo_recipes/finetune_ctc.py): configs, fine-tuning from a .nemo, resume, user errors.

The fine-tune tests run the real entry script in a subprocess on a handful of the bundled sample's
utterances with a 1-layer model, so each takes tens of seconds (mostly NeMo's import time).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import time
from pathlib import Path

import pytest

pytest.importorskip("nemo.collections.asr")

import torch  # noqa: E402
from hydra.errors import ConfigCompositionException  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from duet.asr import recipe  # noqa: E402
from duet.foundation import python_command  # noqa: E402
from tests.asr_helpers import (  # noqa: E402
    MICRO_MODEL,
    REPO,
    SAMPLE_TRAIN,
    build_micro_model,
    sample_utterances,
    train_tokenizer,
    write_manifest,
)
from tests.asr_helpers import compose_config as _compose  # noqa: E402

SCRIPT = REPO / "nemo_recipes" / "finetune_ctc.py"


@pytest.fixture(scope="module")
def micro_setup(tmp_path_factory):
    """Manifests of 8 sample utterances, two different tokenizers, and a 1-layer base .nemo using the first."""
    if not SAMPLE_TRAIN.is_dir():
        pytest.skip("bundled sample missing: run tools/make_sample_corpus.py")
    root = tmp_path_factory.mktemp("asr_micro")
    entries = sample_utterances(8)
    train = write_manifest(root / "train.json", entries)
    dev = write_manifest(root / "dev.json", entries[:4])
    texts = [e["text"] for e in entries]
    base_tok = train_tokenizer(texts, root / "tok_base", 40)
    new_tok = train_tokenizer(texts + ["a different text gives a different tokenizer"], root / "tok_new", 48)
    base = build_micro_model(base_tok)
    base_nemo = root / "micro_base.nemo"
    base.save_to(str(base_nemo))
    return {"root": root, "train": train, "dev": dev, "base_tok": base_tok, "new_tok": new_tok, "base_nemo": base_nemo}


def _recipe_args(setup: dict, exp_dir: Path, *extra: str) -> list[str]:
    return [
        "--config-name", "fastconformer_tiny",
        *MICRO_MODEL,
        f"init_from_nemo_model={setup['base_nemo']}",
        f"model.train_ds.manifest_filepath={setup['train']}",
        f"model.validation_ds.manifest_filepath={setup['dev']}",
        f"model.test_ds.manifest_filepath={setup['dev']}",
        f"model.tokenizer.dir={setup['new_tok']}",
        "model.train_ds.batch_size=4", "model.train_ds.num_workers=0",
        "model.validation_ds.num_workers=0", "model.test_ds.num_workers=0",
        "model.spec_augment.freq_masks=0", "model.spec_augment.time_masks=0",
        "asr_optim=finetune", "model.optim.lr=1e-2", "model.optim.sched.warmup_ratio=0.0",
        "trainer.log_every_n_steps=1", "trainer.enable_progress_bar=false",
        f"exp_manager.exp_dir={exp_dir}", "name=micro",
        *extra,
    ]


def _run(python: str, args: list[str], timeout: float = 600, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([python, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout, cwd=REPO, **kw)


def _train_losses(metrics_csv: Path) -> list[tuple[int, float]]:
    import csv

    rows = list(csv.DictReader(open(metrics_csv, encoding="utf-8")))
    return [(int(r["step"]), float(r["train_loss"])) for r in rows if r.get("train_loss")]


# ---------------------------------------------------------------- configs (no training)


@pytest.mark.parametrize(
    "config_name, encoder_params",
    [("fastconformer_small", 12_600_240), ("conformer_small", 12_972_608)],
)
def test_small_configs_build_the_issue_sized_models(config_name, encoder_params, tmp_path):
    from nemo.collections.asr.models import EncDecCTCModelBPE

    entries = sample_utterances(8) if SAMPLE_TRAIN.is_dir() else [{"text": "a small text for a tokenizer"}] * 8
    tok = train_tokenizer([e["text"] for e in entries] * 4, tmp_path / "tok", 32)
    cfg = _compose(config_name, [f"model.tokenizer.dir={tok}", "model.train_ds.manifest_filepath=null",
                                 "model.validation_ds.manifest_filepath=null"])
    enc = cfg.model.encoder
    assert (enc.n_layers, enc.d_model, enc.n_heads) == (16, 176, 4)
    assert cfg.model.preprocessor.features == 80 and cfg.model.spec_augment.time_masks == 5
    model = EncDecCTCModelBPE(cfg=cfg.model)
    assert sum(p.numel() for p in model.encoder.parameters()) == encoder_params
    # decoder: a 1x1 conv from d_model to vocabulary + blank
    assert sum(p.numel() for p in model.decoder.parameters()) == (176 + 1) * (32 + 1)


def test_tiny_config_stays_under_the_checkpoint_budget():
    cfg = _compose("fastconformer_tiny", ["model.tokenizer.dir=unused", "model.train_ds.manifest_filepath=null",
                                          "model.validation_ds.manifest_filepath=null"])
    from nemo.collections.asr.modules import ConformerEncoder

    encoder_cfg = OmegaConf.to_container(cfg.model.encoder)
    encoder_cfg.pop("_target_")
    params = sum(p.numel() for p in ConformerEncoder(**encoder_cfg).parameters())
    decoder_1024 = (cfg.model.encoder.d_model + 1) * 1025
    # fp32 weights of the whole model at the report's 1024 tokens must fit a 15 MB .nemo
    assert 4 * (params + decoder_1024) < 15e6
    assert cfg.model.optim.sched.warmup_steps == 300 and cfg.init_from_nemo_model is None


def test_unknown_config_key_is_an_error():
    with pytest.raises(ConfigCompositionException, match="n_layerz"):
        _compose("fastconformer_small", ["model.encoder.n_layerz=3"])


def test_trainer_resolves_to_cpu_defaults_and_keeps_user_values():
    cfg = _compose("fastconformer_small", [])
    if torch.cuda.is_available():
        pytest.skip("checks the CPU defaults")
    resolved = recipe.resolve_trainer_config(cfg.trainer)
    assert (resolved["accelerator"], resolved["devices"], resolved["strategy"]) == ("cpu", 1, "auto")
    assert resolved["precision"] == "32-true" and resolved["sync_batchnorm"] is False
    user = _compose("fastconformer_small", ["trainer.devices=2", "trainer.strategy=ddp", "trainer.accelerator=cpu"])
    resolved = recipe.resolve_trainer_config(user.trainer)
    assert (resolved["devices"], resolved["strategy"]) == (2, "ddp")
    bad = _compose("fastconformer_small", ["trainer.accelerator=cpu", "trainer.sync_batchnorm=true"])
    with pytest.raises(recipe.RecipeError, match="sync_batchnorm"):
        recipe.resolve_trainer_config(bad.trainer)


def test_decoder_row_sources_copy_shared_pieces_and_spell_the_others():
    old = ["<unk>", "\u2581de", "gre", "es", "\u2581t", "h", "e", "\u2581the"]
    new = ["<unk>", "\u2581the", "\u2581degrees", "\u2581th", "x"]
    assert recipe.decoder_row_sources(old, new) == [[0], [7], [1, 2, 3], [4, 5], []]


def test_new_tokenizer_keeps_the_checkpoint_decoder_rows(micro_setup):
    """After the switch, shared pieces and the blank score exactly as before; others start from their parts."""
    from nemo.collections.asr.models import ASRModel

    model = ASRModel.restore_from(str(micro_setup["base_nemo"]), map_location="cpu")
    old_pieces, old_layer = list(model.tokenizer.vocab), model.decoder.decoder_layers[0]
    old_weight, old_bias = old_layer.weight.detach().clone(), old_layer.bias.detach().clone()
    result = recipe.match_tokenizer(model, OmegaConf.create({"dir": str(micro_setup["new_tok"]), "type": "bpe"}))
    new_pieces, layer = list(model.tokenizer.vocab), model.decoder.decoder_layers[0]
    shared = [p for p in new_pieces if p in old_pieces]
    assert result == {"pieces": 48, "copied": len(shared), "composed": result["composed"]} and len(shared) > 20
    for piece in shared:
        assert torch.equal(layer.weight[new_pieces.index(piece)], old_weight[old_pieces.index(piece)])
    assert torch.equal(layer.weight[-1], old_weight[-1]) and layer.bias[-1] == old_bias[-1]  # blank
    sources = recipe.decoder_row_sources(old_pieces, new_pieces)
    composed = next(i for i, p in enumerate(new_pieces) if p not in old_pieces and sources[i])
    assert torch.allclose(layer.weight[composed], old_weight[sources[composed]].mean(dim=0))
    # the same tokenizer again changes nothing
    assert recipe.match_tokenizer(model, OmegaConf.create({"dir": str(micro_setup["new_tok"]), "type": "bpe"})) is None


# ---------------------------------------------------------------- user errors through the CLI


def _assert_one_line_error(proc: subprocess.CompletedProcess, *needles: str) -> str:
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr + proc.stdout
    error_lines = [line for line in proc.stderr.splitlines() if line.startswith("finetune_ctc: error:")]
    assert len(error_lines) == 1, proc.stderr[-2000:]
    for needle in needles:
        assert needle in error_lines[0]
    return error_lines[0]


def test_both_init_keys_are_rejected_naming_both(python, micro_setup, tmp_path):
    proc = _run(python, _recipe_args(micro_setup, tmp_path, "init_from_pretrained_model=stt_en_conformer_ctc_small"))
    _assert_one_line_error(proc, "init_from_nemo_model", "init_from_pretrained_model")


def test_pretrained_name_offline_fails_at_once_pointing_to_a_local_file(python, micro_setup, tmp_path):
    args = [a for a in _recipe_args(micro_setup, tmp_path) if not a.startswith("init_from_nemo_model=")]
    # an unroutable proxy makes the download fail even on a machine that has internet
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9"}
    proc = _run(python, args + ["init_from_pretrained_model=stt_en_conformer_ctc_small"], env=env, timeout=300)
    _assert_one_line_error(proc, "stt_en_conformer_ctc_small", "init_from_nemo_model=")
    assert "Sleeping" not in proc.stdout + proc.stderr


def test_missing_manifest_is_named(python, micro_setup, tmp_path):
    missing = tmp_path / "nope.json"
    args = [a for a in _recipe_args(micro_setup, tmp_path) if not a.startswith("model.train_ds.manifest_filepath=")]
    proc = _run(python, args + [f"model.train_ds.manifest_filepath={missing}"])
    _assert_one_line_error(proc, "model.train_ds.manifest_filepath", str(missing))


def test_a_missing_required_value_is_one_line_before_anything_else(python, tmp_path):
    proc = _run(python, ["--config-name", "fastconformer_small", "name=???",
                         "model.validation_ds.manifest_filepath=???", f"exp_manager.exp_dir={tmp_path}"], timeout=300)
    assert proc.returncode == 2 and proc.stdout == ""  # no config dump before it
    assert proc.stderr.splitlines() == ["finetune_ctc: error: missing required values "
                                        "model.validation_ds.manifest_filepath, name: add "
                                        "model.validation_ds.manifest_filepath=... name=... to the command"]
    assert not any(tmp_path.iterdir())  # and no run folder


def test_the_default_data_and_tokenizer_name_the_commands_that_make_them(tmp_path, monkeypatch):
    """The design's order on a fresh clone: make_manifest.py, then train_tokenizer.py, then the recipe."""
    cfg = _compose("fastconformer_small", [])
    assert (cfg.model.train_ds.manifest_filepath, cfg.model.validation_ds.manifest_filepath, cfg.model.tokenizer.dir) \
        == ("manifests/train-clean.json", "manifests/dev-clean.json", "tokenizers/spe_bpe_v1024")
    # the recipe's paths are relative to the working directory: from the repository root they are the tools' outputs
    from duet.data.manifest import make_manifest_command

    monkeypatch.chdir(REPO)
    # the commands as typed in this shell (duet.foundation.python_command: python where that is this interpreter)
    assert make_manifest_command(cfg.model.train_ds.manifest_filepath) == python_command("tools/make_manifest.py")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(recipe.RecipeError, match=r"^model.train_ds.manifest_filepath: manifest not found: "
                                                 r"manifests/train-clean.json \(run "
                                                 + re.escape(python_command("tools/make_manifest.py")) +
                                                 r" --out-dir manifests first\)$"):
        recipe.check_inputs(cfg)
    assert make_manifest_command(tmp_path / "mine.json") is None  # not the bundled sample's: nothing to suggest
    monkeypatch.chdir(REPO)
    assert tokenizer_training_command(cfg) == python_command("tools/train_tokenizer.py")
    elsewhere = _compose("fastconformer_small", [f"model.train_ds.manifest_filepath={tmp_path / 'mine.json'}",
                                                 f"model.tokenizer.dir={tmp_path / 'toks' / 'spe_unigram_v256'}"])
    assert tokenizer_training_command(elsewhere) == (
        f"{python_command('tools/train_tokenizer.py')} --manifests {tmp_path / 'mine.json'} --vocab-size 256 "
        "--type unigram "
        f"--out-root {tmp_path / 'toks'}")
    # a folder the tool does not name: how to make one
    for name in ("train.json", "dev.json"):
        (tmp_path / name).write_text("{}\n")
    odd = _compose("fastconformer_small", [f"model.train_ds.manifest_filepath={tmp_path / 'train.json'}",
                                           f"model.validation_ds.manifest_filepath={tmp_path / 'dev.json'}",
                                           f"model.tokenizer.dir={tmp_path / 'my_tokenizer'}"])
    with pytest.raises(recipe.RecipeError, match=r"no tokenizer in .*my_tokenizer \(make one with "
                                                 + re.escape(python_command("tools/train_tokenizer.py")) +
                                                 r" \(it writes tokenizers/spe_<type>_v<size>\)"):
        recipe.check_inputs(odd)


def tokenizer_training_command(cfg) -> str:
    from duet.data.tokenizer import training_command

    return training_command(cfg.model.tokenizer.dir, recipe.train_manifests(cfg.model))


def test_the_cpu_cost_line_follows_the_measured_speeds_and_the_run_length(tmp_path):
    assert recipe.cpu_training_speed(12.8e6) == pytest.approx(6.0)
    assert recipe.cpu_training_speed(3.3e6) == pytest.approx(20.0)
    assert 6.0 < recipe.cpu_training_speed(8e6) < 20.0
    manifest = tmp_path / "train.json"
    manifest.write_text("".join(json.dumps({"audio_filepath": "x.flac", "duration": 2.25, "text": "a"}) + "\n"
                                for _ in range(800)))  # 30 min of audio
    cfg = _compose("fastconformer_small", [f"model.train_ds.manifest_filepath={manifest}"])
    line = recipe.cpu_cost_line(12_800_000, cfg.model, cfg.trainer)
    # 50 epochs x 0.5 h at 6x real time
    assert "12.8 M-parameter model" in line and "50 epochs of 0.50 h of audio take about 4.2 h" in line
    assert "trainer.max_steps=N (a step is 16 utterances)" in line
    short = _compose("fastconformer_small", [f"model.train_ds.manifest_filepath={manifest}", "trainer.max_steps=200"])
    # 200 steps x 16 x 2.25 s = 2 h of audio at 6x: 20 min
    assert "200 steps take about 20 min" in recipe.cpu_cost_line(12_800_000, short.model, short.trainer)


def test_the_cpu_cost_line_of_the_whisper_recipe_uses_its_measured_speed(tmp_path):
    manifest = tmp_path / "train.json"
    manifest.write_text(json.dumps({"audio_filepath": "x.flac", "duration": 2.0, "text": "a"}) + "\n")
    cfg = _compose("whisper_tiny_ctc", ["init_from_nemo_model=m.nemo", f"synthetic_manifest={manifest}",
                                        f"real_manifest={manifest}", f"pseudo_manifest={manifest}",
                                        "trainer.max_steps=1000"])
    # 1,000 steps of 80 s at 47x real time: 28 min (the FastConformer law would say 2.7 h for 9.1 M parameters)
    assert "1000 steps take about 28 min" in recipe.cpu_cost_line(9_100_000, cfg.model, cfg.trainer)


# ---------------------------------------------------------------- training


def test_finetune_from_nemo_switches_tokenizer_learns_and_writes_outputs(python, micro_setup, tmp_path):
    proc = _run(python, _recipe_args(micro_setup, tmp_path, "trainer.max_epochs=10"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = tmp_path / "micro"
    summary = json.loads((run_dir / "finetune_summary.json").read_text())
    assert summary["vocabulary_changed"] is True and summary["decoder_transfer"]["copied"] > 0
    assert summary["global_step"] == 10 * 2  # 8 utterances / batch 4 = 2 steps per epoch
    assert {"test_before", "test_after"} <= summary.keys()
    losses = [loss for _, loss in _train_losses(run_dir / "csv_logs" / "metrics.csv")]
    # the two batches (short and long utterances) alternate: compare whole epochs
    assert len(losses) == 20 and sum(losses[-2:]) < 0.8 * sum(losses[:2])
    from nemo.collections.asr.models import ASRModel

    tuned = ASRModel.restore_from(summary["model"], map_location="cpu")
    assert tuned.tokenizer.vocab_size == 48 and tuned.decoder.num_classes_with_blank == 49
    assert list((run_dir / "checkpoints").glob("*last.ckpt")) and (run_dir / "resolved_config.yaml").is_file()
    utterances = (run_dir / "test_after_utterances.jsonl").read_text().splitlines()
    assert len(utterances) == 4 and {"id", "ref", "hyp", "wer"} <= json.loads(utterances[0]).keys()
    assert "finetune_ctc: micro done" in proc.stdout
    assert "Config:\n" not in proc.stdout + proc.stderr  # the resolved config is in the run folder only
    # the console holds the run's own lines: what it trains, where it writes, progress, validation and test WER;
    # NeMo's and Lightning's lines are in the run's library log
    console = proc.stdout.splitlines()
    assert proc.stderr == "" and all(line.startswith("finetune_ctc: ") for line in console), proc.stdout
    assert console[0].startswith(f"finetune_ctc: micro: fine-tuning {micro_setup['base_nemo']} on ")
    library_log = tmp_path / "logs" / "finetune_ctc_micro.log"
    assert f"NeMo's and Lightning's log: {library_log}" in console[1] and "[NeMo I" in library_log.read_text()
    assert sum(line.startswith("finetune_ctc: validation after epoch ") for line in console) == 10
    assert any(line.startswith("finetune_ctc: epoch 1/10, step 1/20 (5 %), loss ") for line in console)


def test_killed_run_resumes_from_its_last_checkpoint(python, micro_setup, tmp_path):
    # The run is frozen (SIGSTOP) as soon as a last checkpoint shows, and killed once one is complete: however fast
    # the machine, it cannot end in between, so a short run will do. (Waiting for the file, renamed each epoch, to
    # keep its name and size over two looks while the run went on took 100 epochs to be safe.)
    epochs = 10
    args = _recipe_args(micro_setup, tmp_path, f"trainer.max_epochs={epochs}", "evaluate_before_fit=false",
                        "model.test_ds.manifest_filepath=null")
    ckpt_dir = tmp_path / "micro" / "checkpoints"
    proc = subprocess.Popen([python, str(SCRIPT), *args], cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline, step_at_kill = time.monotonic() + 600, None
        while step_at_kill is None:
            assert proc.poll() is None, "the run finished before it could be killed"
            assert time.monotonic() < deadline, "no last checkpoint in 10 minutes"
            if ckpt_dir.is_dir() and any(ckpt_dir.glob("*last.ckpt")):
                proc.send_signal(signal.SIGSTOP)
                time.sleep(0.1)  # stopped: what is on disk stays as it is
                found = recipe.last_checkpoint(ckpt_dir.parent)  # one NeMo marks finished, as a re-run sees them
                if found is None:
                    proc.send_signal(signal.SIGCONT)  # stopped mid-save: let it finish writing
                else:
                    step_at_kill = found[1]
            time.sleep(0.05)
    finally:
        proc.kill()  # a preempted job: no clean-up code runs
        proc.wait()
    assert 0 < step_at_kill < epochs * 2

    resumed = _run(python, args)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "\nfinetune_ctc: resuming from " in resumed.stdout
    summary = json.loads((tmp_path / "micro" / "finetune_summary.json").read_text())
    assert summary["global_step"] == epochs * 2
    steps = [step for step, _ in _train_losses(tmp_path / "micro" / "csv_logs" / "metrics.csv")]
    # the resumed run logs only steps after the checkpoint; nothing is trained twice
    assert steps and min(steps) >= step_at_kill


def test_sigterm_stops_the_run_saying_where_and_the_command_that_resumes_it(python, micro_setup, tmp_path):
    # frozen (SIGSTOP) the moment its second validation is printed, the run gets SIGTERM as it continues: a short
    # run cannot end before it, however fast the machine
    epochs = 8
    args = _recipe_args(micro_setup, tmp_path, f"trainer.max_epochs={epochs}", "evaluate_before_fit=false",
                        "model.test_ds.manifest_filepath=null")
    console = tmp_path / "console.txt"
    with open(console, "w") as out:
        proc = subprocess.Popen([python, str(SCRIPT), *args], cwd=REPO, stdout=out, stderr=subprocess.PIPE,
                                text=True)
        try:
            deadline = time.monotonic() + 600
            while proc.poll() is None and time.monotonic() < deadline and "validation after epoch 2/" not in \
                    console.read_text():
                time.sleep(0.05)
            proc.send_signal(signal.SIGSTOP)
            assert proc.poll() is None, "the run finished before it could be stopped"
            proc.send_signal(signal.SIGTERM)  # delivered once it continues
            proc.send_signal(signal.SIGCONT)
            _, err = proc.communicate(timeout=300)
        finally:
            proc.kill()
    assert proc.returncode == 143 and err == "", err[-3000:]
    stopped = console.read_text().splitlines()[-1]
    where = re.match(r"finetune_ctc: stopped by SIGTERM at step (\d+), epoch \d+; a re-run resumes from step (\d+) "
                     r"\(.+-last\.ckpt\); resume with: (.+)$", stopped)
    assert where and 0 < int(where[2]) <= int(where[1]) < epochs * 2, stopped
    # the command, as typed in this shell, resumes the run to its end
    resumed = subprocess.run(shlex.split(where[3]), cwd=REPO, capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "\nfinetune_ctc: resuming from " in resumed.stdout
    assert json.loads((tmp_path / "micro" / "finetune_summary.json").read_text())["global_step"] == epochs * 2


@pytest.mark.integration
def test_two_process_cpu_ddp_run_trains_on_both_ranks(python, micro_setup, tmp_path):
    """Lightning DDP (gloo) with two CPU processes: what trainer.devices=N does on a multi-GPU machine."""
    proc = _run(python, _recipe_args(micro_setup, tmp_path, "trainer.max_epochs=3", "trainer.accelerator=cpu",
                                     "trainer.devices=2", "trainer.strategy=ddp", "trainer.sync_batchnorm=false"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    # Lightning's lines are in each rank's library log (rank 1's beside rank 0's, so that neither truncates the other)
    output = "".join(log.read_text() for log in sorted((tmp_path / "logs").glob("finetune_ctc_micro*.log")))
    assert "MEMBER: 1/2" in output and "MEMBER: 2/2" in output  # both ranks joined the process group
    assert "MEMBER" not in proc.stdout + proc.stderr
    summary = json.loads((tmp_path / "micro" / "finetune_summary.json").read_text())
    # 8 utterances shared by 2 ranks at batch 4: one step per epoch, where one process would take two
    assert summary["global_step"] == 3 and summary["test_after"]["utterances"] == 4


def test_comma_separated_train_manifests_are_each_checked(tmp_path):
    # NeMo concatenates "a.json,b.json"; the recipe checks every part and names the missing one
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    first.write_text("{}\n")
    with pytest.raises(recipe.RecipeError, match=f"manifest not found: {second}$"):
        recipe._check_manifest("model.train_ds.manifest_filepath", f"{first},{second}")
    second.write_text("{}\n")
    recipe._check_manifest("model.train_ds.manifest_filepath", f"{first},{second}")


def test_training_layout_is_channels_last_on_cpu_only_and_undone():
    from types import SimpleNamespace

    import torch
    from lightning.pytorch.accelerators import CPUAccelerator

    from duet.asr.recipe import training_layout

    model = torch.nn.Sequential(torch.nn.Conv2d(4, 8, 3), torch.nn.Conv2d(8, 8, 3))  # no 1-sized dim: layouts differ
    params = list(model.parameters())
    with training_layout(model, SimpleNamespace(accelerator=CPUAccelerator())):
        assert all(m.weight.is_contiguous(memory_format=torch.channels_last) and not m.weight.is_contiguous()
                   for m in model)
    assert all(m.weight.is_contiguous() for m in model)
    assert list(model.parameters()) == params  # same Parameter objects: an optimizer made inside still holds them
    with training_layout(model, SimpleNamespace(accelerator=object())):  # a GPU accelerator: left alone
        assert all(m.weight.is_contiguous() for m in model)
