"""The recipe's encoder_finetune settings: a pretrained encoder's lower learning rate and its frozen first steps."""

from types import SimpleNamespace

import pytest
import torch
from omegaconf import OmegaConf

from duet.asr import recipe


class TinyEncoder(torch.nn.Module):
    """An encoder with a pretrained part and a new adapter, as WhisperEncoder tells them apart."""

    def __init__(self):
        super().__init__()
        self.old = torch.nn.Linear(4, 4)
        self.adapter = torch.nn.Linear(4, 4)

    def pretrained_parameters(self):
        return list(self.old.parameters())


class TinyModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = TinyEncoder()
        self.decoder = torch.nn.Linear(4, 3)
        self.cfg = OmegaConf.create({"optim": {"lr": 1e-3}})


def test_pretrained_weights_get_the_scaled_rate_and_everything_else_the_base_rate():
    model, trainer = TinyModel(), SimpleNamespace(callbacks=[])
    applied = recipe.use_encoder_finetune(model, trainer, OmegaConf.create({"lr_scale": 0.1, "freeze_steps": 0}))
    model.setup_optimizer_param_groups()  # what NeMo's setup_optimization calls
    rest, pretrained = model._optimizer_param_groups
    assert {id(p) for p in pretrained["params"]} == {id(p) for p in model.encoder.old.parameters()}
    assert pretrained["lr"] == pytest.approx(1e-4) and "lr" not in rest
    assert {id(p) for p in rest["params"]} == {id(p) for m in (model.encoder.adapter, model.decoder) for p in m.parameters()}
    assert applied == {"lr_scale": 0.1, "freeze_steps": 0, "pretrained_parameters": 20}
    assert trainer.callbacks == []


def test_pretrained_weights_stay_fixed_for_the_first_steps_then_train():
    model, trainer = TinyModel(), SimpleNamespace(callbacks=[])
    recipe.use_encoder_finetune(model, trainer, OmegaConf.create({"lr_scale": 1.0, "freeze_steps": 3}))
    (freeze,) = trainer.callbacks
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    before = model.encoder.old.weight.detach().clone()
    for step in range(5):
        freeze.on_train_batch_start(SimpleNamespace(global_step=step), model, None, step)
        optimizer.zero_grad()
        model.decoder(model.encoder.adapter(model.encoder.old(torch.ones(2, 4)))).sum().backward()
        optimizer.step()
        moved = not torch.equal(model.encoder.old.weight, before)
        assert moved == (step >= 3), step
    assert model.encoder.adapter.weight.requires_grad


def test_bad_settings_are_named():
    with pytest.raises(recipe.RecipeError, match="encoder_finetune: lr_scale must be > 0"):
        recipe.use_encoder_finetune(TinyModel(), SimpleNamespace(callbacks=[]),
                                    OmegaConf.create({"lr_scale": 0, "freeze_steps": 0}))
