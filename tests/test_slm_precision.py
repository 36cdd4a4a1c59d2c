"""SLM training precision from (faked) device facts: bf16 only where a GPU runs it natively."""

import pytest
import torch

from slm import finetune
from slm.config import load_config
from slm.modeling import pick_device_and_training_precision, precision_arguments, training_precision


@pytest.mark.parametrize("capability, chosen", [((7, 0), "fp16"), ((7, 5), "fp16"), ((8, 0), "bf16"),
                                                ((9, 0), "bf16"), (None, "fp32")])
def test_auto_is_bf16_only_on_native_bf16_gpus_and_fp16_on_older_ones(capability, chosen):
    assert training_precision("auto", capability) == chosen


def test_explicit_precisions_are_kept_and_bad_ones_named():
    assert training_precision("fp32", (9, 0)) == "fp32" and training_precision("bf16", None) == "bf16"
    assert training_precision("fp16", (7, 0)) == "fp16"
    with pytest.raises(ValueError, match="fp16 needs a GPU"):
        training_precision("fp16", None)
    with pytest.raises(ValueError, match="'half'"):
        training_precision("half", (8, 0))
    assert precision_arguments("fp16") == {"bf16": False, "fp16": True}
    assert precision_arguments("fp32") == {"bf16": False, "fp16": False}


def test_a_v100_that_emulates_bf16_trains_in_fp16_on_its_local_rank(monkeypatch):
    asked = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)  # emulation counts here
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: asked.append(device) or (7, 0))
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert pick_device_and_training_precision("auto") == ("cuda:1", "fp16") and asked == [1]


@pytest.mark.parametrize("precision, bf16, fp16", [("fp16", False, True), ("fp32", False, False)])  # bf16: checked by
# TrainingArguments against this CPU, so not constructible here
def test_the_chosen_precision_reaches_the_trainer(precision, bf16, fp16, tmp_path, monkeypatch):
    """The fine-tune hands the Trainer fp16 on a V100 (it used to know only bf16 or fp32)."""
    monkeypatch.setattr(finetune, "_cuda", lambda: True)
    cfg = load_config("slm_tiny_offline")
    arguments = finetune.make_training_args(cfg, tmp_path, precision, n_eval=0)
    assert (arguments.bf16, arguments.fp16, arguments.use_cpu) == (bf16, fp16, False)
