"""Encoder variants of the A/B study (issue 7): baseline, ResMHA, progressive downsampling, both.

A variant is a set of encoder-config changes. :func:`convert_checkpoint` turns a plain
FastConformer/Conformer ``.nemo`` into a variant ``.nemo`` carrying over every weight whose shape
still fits (all of them for ResMHA; all but the subsampling front end for progressive downsampling,
whose first stage runs at a finer frame rate). The fine-tuning recipe then starts from that file
through ``init_from_nemo_model`` like from any checkpoint (it restores a checkpoint's own encoder,
so the variant must be in the file).

Progressive downsampling here keeps the baseline's output frame rate: a 4x front end (40 ms frames)
for the first half of the layers, then NeMo's max-pooling reduction to 80 ms for the second half.
The tempting 8x -> 16x (160 ms) variant leaves too few CTC frames for fast speech: on the bundled
sample with the 256-token BPE, 216 of 520 training utterances cannot be aligned at 160 ms
(:func:`duet.asr.progressive.check_ctc_lengths` reports it).
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf, open_dict

from duet.foundation.files import atomic_path

RESMHA_TARGET = "duet.asr.resmha.ResidualAttentionConformerEncoder"

_RESMHA = {"_target_": RESMHA_TARGET, "residual_attention": True, "use_pytorch_sdpa": False}
# "subsampling_factor": "half" = half the base model's factor (8x -> 4x), restored by the 2x reduction;
# "reduction_position": "middle" = after layer n_layers // 2 - 1.
_PROGRESSIVE = {"subsampling_factor": "half", "reduction": "pooling", "reduction_position": "middle",
                "reduction_factor": 2}
# Encoder keys each variant changes.
VARIANTS: dict[str, dict] = {
    "baseline": {},
    "resmha": _RESMHA,
    "progressive": _PROGRESSIVE,
    "resmha+progressive": {**_RESMHA, **_PROGRESSIVE},
}


def variant_encoder_changes(variant: str, encoder_cfg) -> dict:
    """The encoder keys ``variant`` sets, resolved for the base encoder config ``encoder_cfg``."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown encoder variant {variant!r}: expected one of {', '.join(VARIANTS)}")
    changes = dict(VARIANTS[variant])
    if changes.get("reduction_position") == "middle":
        changes["reduction_position"] = int(encoder_cfg["n_layers"]) // 2 - 1
    if changes.get("subsampling_factor") == "half":
        factor = int(encoder_cfg.get("subsampling_factor", 4))
        if factor < 4:
            raise ValueError(f"progressive downsampling needs a subsampling_factor >= 4 to halve, not {factor}")
        changes["subsampling_factor"] = factor // 2
    return changes


def apply_variant(model_cfg: DictConfig, variant: str) -> DictConfig:
    """A copy of ``model_cfg`` (with ``encoder``) whose encoder section carries the variant's changes."""
    cfg = OmegaConf.create(OmegaConf.to_container(model_cfg, resolve=True))
    with open_dict(cfg):
        cfg.encoder.update(variant_encoder_changes(variant, cfg.encoder))
    return cfg


def hydra_overrides(variant: str, encoder_cfg: DictConfig | dict) -> list[str]:
    """The variant as Hydra command-line overrides of a recipe config (``+key`` for keys it lacks)."""
    overrides = []
    for key, value in variant_encoder_changes(variant, encoder_cfg).items():
        prefix = "" if key in encoder_cfg else "+"
        overrides.append(f"{prefix}model.encoder.{key}={str(value).lower() if isinstance(value, bool) else value}")
    return overrides


def convert_checkpoint(base_nemo: str | Path, variant: str, out_nemo: str | Path) -> list[str]:
    """Save ``base_nemo`` as a ``variant`` model in ``out_nemo``, keeping every weight whose shape still fits.

    The restored model's encoder is rebuilt from the variant's encoder config and loaded from the base
    encoder's state dict; preprocessor, decoder and tokenizer are the checkpoint's. Returns the encoder
    state-dict keys that could not be carried over and start from a fresh init (none for ResMHA and
    pooling reduction; the subsampling front end when its factor changes).
    """
    from nemo.collections.asr.models import ASRModel

    import duet.asr.resmha  # noqa: F401  (lets NeMo instantiate a ResMHA encoder section)

    model = ASRModel.restore_from(str(base_nemo), map_location="cpu")
    variant_cfg = apply_variant(model.cfg, variant)
    encoder = model.from_config_dict(variant_cfg.encoder)
    old_state, new_state = model.encoder.state_dict(), encoder.state_dict()
    carried = {k: v for k, v in old_state.items() if k in new_state and new_state[k].shape == v.shape}
    encoder.load_state_dict(carried, strict=False)
    reinitialised = sorted(set(new_state) - set(carried))
    model.encoder = encoder
    with open_dict(model.cfg):
        model.cfg.encoder = variant_cfg.encoder
    with atomic_path(out_nemo) as tmp_path:
        model.save_to(str(tmp_path))
    return reinitialised
