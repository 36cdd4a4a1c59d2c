"""Decisions of the NeMo CTC recipe that depend on the machine or on the checkpoint (duet/asr/recipe.py):
precision, device count, loader workers, evaluation device, the reused "before" score, the fused gradient
norm, the config's training keys and tokenizer on a restored checkpoint, the documented variant commands.

GPU facts are faked (monkeypatched torch / Lightning queries), so all of this runs on a CPU machine.
"""

from __future__ import annotations

import json
import re
import subprocess
from types import SimpleNamespace

import pytest

pytest.importorskip("nemo.collections.asr")

import torch  # noqa: E402
from lightning.pytorch.accelerators import CPUAccelerator, CUDAAccelerator  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from duet.asr import recipe  # noqa: E402
from tests.asr_helpers import (  # noqa: E402
    CONFIGS,
    MICRO_MODEL,
    REPO,
    SAMPLE_TRAIN,
    compose_config,
    sample_utterances,
    train_tokenizer,
    write_manifest,
)

NO_DATA = ["model.train_ds.manifest_filepath=null", "model.validation_ds.manifest_filepath=null"]


# ---------------------------------------------------------------- trainer on a (faked) GPU machine


@pytest.fixture
def fake_gpus(monkeypatch):
    """A machine with ``n`` visible CUDA GPUs of compute capability ``capability``, for Lightning and torch."""
    import lightning.fabric.accelerators.cuda as fabric_cuda
    import lightning.pytorch.accelerators.cuda as pytorch_cuda

    def install(n: int, capability: tuple[int, int]):
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *_: capability)
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)  # what emulation reports
        monkeypatch.setattr(fabric_cuda, "_get_all_visible_cuda_devices", lambda: list(range(n)))
        monkeypatch.setattr(pytorch_cuda, "num_cuda_devices", lambda: n)

    return install


@pytest.mark.parametrize("capability, precision", [((7, 0), "16-mixed"), ((7, 5), "16-mixed"),
                                                   ((8, 0), "bf16-mixed"), ((9, 0), "bf16-mixed"),
                                                   (None, "32-true")])
def test_bf16_only_on_gpus_that_run_it_natively(capability, precision):
    assert recipe.mixed_precision_for(capability) == precision


@pytest.mark.parametrize("devices, visible, count", [("auto", 1, 1), ("auto", 4, 4), (None, 2, 2), (-1, 3, 3),
                                                      ("-1", 3, 3), ("2", 4, 2), (2, 4, 2), ("0,1", 4, 2),
                                                      ("1,", 4, 1), ([0, 2], 4, 2), ([1], 4, 1)])
def test_trainer_devices_are_counted_the_way_lightning_reads_them(fake_gpus, devices, visible, count):
    fake_gpus(visible, (8, 0))
    assert recipe.requested_gpu_count(devices) == count


def test_gpu_trainer_defaults_on_a_one_gpu_v100_and_a_four_gpu_a100(fake_gpus):
    fake_gpus(1, (7, 0))
    resolved = recipe.resolve_trainer_config(compose_config("fastconformer_small", ["trainer.devices=auto"]).trainer)
    # "auto" is one GPU here, not len("auto") = 4: no DDP, no synchronised batch norm
    assert (resolved["strategy"], resolved["sync_batchnorm"], resolved["precision"]) == ("auto", False, "16-mixed")
    fake_gpus(4, (8, 0))
    resolved = recipe.resolve_trainer_config(compose_config("fastconformer_small", []).trainer)
    assert (resolved["devices"], resolved["strategy"], resolved["sync_batchnorm"]) == ("auto", "ddp", True)
    assert resolved["precision"] == "bf16-mixed"


# ---------------------------------------------------------------- data-loader workers


@pytest.mark.parametrize("cpus, processes, on_gpu, workers", [(16, 1, True, 8), (16, 2, True, 8), (16, 8, True, 2),
                                                              (4, 8, True, 1), (64, 4, True, 8), (16, 1, False, 1)])
def test_loader_workers_share_the_node_cores_on_gpu_and_stay_one_on_cpu(cpus, processes, on_gpu, workers):
    assert recipe.loader_workers_for(cpus, processes, on_gpu) == workers


def test_unset_loader_workers_are_filled_from_the_machine_and_set_ones_kept(monkeypatch):
    cfg = compose_config("fastconformer_small", ["model.test_ds.num_workers=0"])
    assert cfg.model.train_ds.num_workers is None and cfg.model.validation_ds.num_workers is None
    monkeypatch.setattr(recipe.os, "cpu_count", lambda: 32)
    recipe.fill_loader_workers(cfg.model, SimpleNamespace(num_devices=8, accelerator=CUDAAccelerator()))
    assert (cfg.model.train_ds.num_workers, cfg.model.validation_ds.num_workers, cfg.model.test_ds.num_workers) == (4, 4, 0)


# ---------------------------------------------------------------- test-set scoring


def test_the_test_set_is_scored_on_the_training_device():
    gpu_trainer = SimpleNamespace(accelerator=CUDAAccelerator(), strategy=SimpleNamespace(root_device=torch.device("cuda", 3)))
    assert recipe.evaluation_device(gpu_trainer) == torch.device("cuda", 3)
    cpu_trainer = SimpleNamespace(accelerator=CPUAccelerator(), strategy=SimpleNamespace(root_device=torch.device("cpu")))
    assert recipe.evaluation_device(cpu_trainer) == torch.device("cpu")


class _RecordingModel(torch.nn.Linear):
    """Records where it is asked to go (this machine has no GPU to really move it to)."""

    def __init__(self):
        super().__init__(2, 2)
        self.moves = []

    def to(self, device):
        self.moves.append(str(device))
        return self


def test_evaluate_test_set_runs_on_the_given_device_and_puts_the_model_back(monkeypatch, tmp_path):
    model = _RecordingModel()
    seen = []

    def fake_evaluate(m, manifest, **_):
        seen.append(m.moves[-1])
        from duet.asr.scoring import score

        return score(["u1"], ["a b"], ["a b"], [1.0])

    monkeypatch.setattr(recipe.evaluation, "evaluate_manifest", fake_evaluate)
    summary = recipe.evaluate_test_set(model, "test.json", tmp_path, "test_after", 4, torch.device("cuda", 1))
    assert seen == ["cuda:1"] and model.moves == ["cuda:1", "cpu"] and summary["wer"] == 0.0


def test_a_resumed_run_reuses_its_before_score(monkeypatch, tmp_path):
    scored = []
    monkeypatch.setattr(recipe, "evaluate_test_set", lambda *a, **k: scored.append(a[1]) or {"wer": 0.5})
    trainer = SimpleNamespace(ckpt_path=None, accelerator=CPUAccelerator())
    (tmp_path / "test_before_summary.json").write_text(json.dumps({"wer": 0.25, "manifest": "test.json"}))
    # a fresh run scores even when an older attempt left a summary behind
    assert recipe.score_before_fit(None, trainer, "test.json", tmp_path, 4) == {"wer": 0.5} and len(scored) == 1
    trainer.ckpt_path = str(tmp_path / "checkpoints" / "last.ckpt")
    assert recipe.score_before_fit(None, trainer, "test.json", tmp_path, 4) == {"wer": 0.25, "manifest": "test.json"}
    assert len(scored) == 1
    # another test manifest: the saved score does not answer for it
    assert recipe.score_before_fit(None, trainer, "other.json", tmp_path, 4) == {"wer": 0.5} and len(scored) == 2


# ---------------------------------------------------------------- gradient norm


def test_grad_norm_is_one_fused_norm_equal_to_the_per_tensor_one(monkeypatch):
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.Linear(7, 3), torch.nn.Linear(3, 1, bias=False))
    module(torch.randn(4, 5)).sum().backward()
    reference = torch.sqrt(sum(p.grad.pow(2).sum() for p in module.parameters()))
    logged = {}
    module.log = lambda name, value, **_: logged.update({name: value})
    per_tensor_norms = []
    original_norm = torch.Tensor.norm
    monkeypatch.setattr(torch.Tensor, "norm", lambda self, *a, **k: per_tensor_norms.append(1) or original_norm(self, *a, **k))
    recipe.GradNormLogger().on_before_optimizer_step(None, module, None)
    assert per_tensor_norms == []  # no norm (and no device sync) per parameter tensor
    assert torch.isclose(logged["grad_norm"], reference)


# ---------------------------------------------------------------- a restored checkpoint and the config


@pytest.fixture
def restored_micro(micro_model_and_manifest):
    """A fresh copy of conftest's micro checkpoint (1 layer, mean_volume CTC, 40-token tokenizer)."""
    from nemo.collections.asr.models import ASRModel

    return ASRModel.restore_from(str(micro_model_and_manifest[1]), map_location="cpu")


def _micro_cfg(*overrides: str):
    return compose_config("fastconformer_tiny", [*MICRO_MODEL, *NO_DATA, "model.tokenizer.dir=null", *overrides])


def test_the_config_training_keys_reach_a_restored_checkpoint_and_survive_a_new_tokenizer(restored_micro, tmp_path):
    model = restored_micro
    assert model.loss.config_reduction == "mean_volume" and not model.is_interctc_enabled()
    cfg = _micro_cfg("model.ctc_reduction=mean_batch", "model.skip_nan_grad=true", "model.log_prediction=false",
                     "model.interctc.loss_weights=[0.3]", "model.interctc.apply_at_layers=[0]")
    recipe.apply_training_settings(model, cfg.model)
    assert model.loss.config_reduction == "mean_batch" and model._skip_nan_grad and model.wer.log_prediction is False
    assert model.is_interctc_enabled() and model.get_interctc_param("intermediate_loss_weights") == [0.3]
    tokenizer = train_tokenizer(["a different text gives a different tokenizer"] * 3 + ["the cat sat on the mat"],
                                tmp_path / "tok", 30)
    recipe.match_tokenizer(model, OmegaConf.create({"dir": str(tokenizer), "type": "bpe"}))
    assert model.tokenizer.vocab_size == 30 and model.loss.config_reduction == "mean_batch"


def test_another_sample_rate_is_refused_by_name(restored_micro):
    with pytest.raises(recipe.RecipeError, match=r"model.sample_rate=8000.*16000"):
        recipe.apply_training_settings(restored_micro, _micro_cfg("model.sample_rate=8000").model)


def test_null_tokenizer_dir_keeps_the_checkpoint_tokenizer_and_is_refused_from_scratch(restored_micro):
    pieces = list(restored_micro.tokenizer.vocab)
    assert recipe.match_tokenizer(restored_micro, _micro_cfg().model.tokenizer) is None
    assert list(restored_micro.tokenizer.vocab) == pieces
    with pytest.raises(recipe.RecipeError, match="model.tokenizer.dir=null"):
        recipe.load_base_model(_micro_cfg(), trainer=None)


def test_a_checkpoint_of_another_architecture_is_named_in_a_warning(restored_micro, caplog):
    assert recipe.warn_if_other_architecture(restored_micro, _micro_cfg()) == {}
    conformer = compose_config("conformer_small", [*NO_DATA, "model.tokenizer.dir=null"])
    with caplog.at_level("WARNING", logger=recipe.log.name):
        differences = recipe.warn_if_other_architecture(restored_micro, conformer)
    assert differences["subsampling"] == ("dw_striding", "striding") and differences["n_layers"] == (1, 16)
    assert "conformer_small" in caplog.text and "subsampling" in caplog.text


# ---------------------------------------------------------------- the documented variant commands


def _documented_optimizer_overrides() -> list[tuple[str, str]]:
    found = []
    for path in sorted(CONFIGS.glob("*.yaml")):
        for line in path.read_text().splitlines():
            if line.lstrip().startswith("#"):
                found += [(path.stem, override) for override in re.findall(r"\+?asr_optim\S*=\w+", line)]
    return found


def test_every_documented_optimizer_override_composes():
    overrides = _documented_optimizer_overrides()
    assert ("fastconformer_small_resmha", "asr_optim=noam_scratch") in overrides
    for config_name, override in overrides:
        cfg = compose_config(config_name, [override, "model.tokenizer.dir=x"])
        option = OmegaConf.load(CONFIGS / "asr_optim" / f"{override.split('=')[1]}.yaml")
        assert cfg.model.optim.sched.name == option.sched.name, (config_name, override)


@pytest.mark.integration
@pytest.mark.parametrize("config_name, extra", [("fastconformer_small_resmha", []),
                                                ("fastconformer_small_progressive", ["model.encoder.reduction_position=0"])])
def test_the_documented_variant_commands_train_through_the_entry_point(python, tmp_path, config_name, extra):
    """The documented from-scratch command, at tiny sizes for one step: NeMo must accept the ResMHA
    ``_target_`` (the entry script registers it) and the optimiser override must compose."""
    if not SAMPLE_TRAIN.is_dir():
        pytest.skip("bundled sample missing: run tools/make_sample_corpus.py")
    entries = sample_utterances(2)
    manifest = write_manifest(tmp_path / "train.json", entries)
    tokenizer = train_tokenizer([e["text"] for e in entries] * 4, tmp_path / "tok", 24)
    proc = subprocess.run(
        [python, str(REPO / "nemo_recipes" / "finetune_ctc.py"), "--config-name", config_name, "asr_optim=noam_scratch",
         "model.encoder.n_layers=2", "model.encoder.d_model=32", "model.encoder.n_heads=2",
         "model.encoder.subsampling_conv_channels=16", *extra, f"model.tokenizer.dir={tokenizer}",
         f"model.train_ds.manifest_filepath={manifest}", f"model.validation_ds.manifest_filepath={manifest}",
         "model.train_ds.batch_size=2", "model.train_ds.num_workers=0", "model.validation_ds.num_workers=0",
         "trainer.max_steps=1", "trainer.enable_progress_bar=false", f"exp_manager.exp_dir={tmp_path}", "name=variant"],
        capture_output=True, text=True, timeout=300, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((tmp_path / "variant" / "finetune_summary.json").read_text())
    assert summary["global_step"] == 1
