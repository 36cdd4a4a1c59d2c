"""Residual Multi-Head Self-Attention (ResMHA) for NeMo's Conformer/FastConformer encoder.

Each layer's pre-softmax attention scores add the previous layer's pre-softmax scores (residual
attention logits, as in RealFormer and the seed report's equation 4-19)::

    A_l = (Q K^T + rel-pos terms) / sqrt(d_k) + A_{l-1},    attn_l = softmax(A_l)

Everything else is NeMo's: :class:`ResidualAttentionConformerEncoder` *is* a
``nemo.collections.asr.modules.ConformerEncoder`` (same constructor, same parameters, same layer
loop); with ``residual_attention: true`` it swaps the class of each layer's attention module for a
subclass whose ``forward_attention`` (the NeMo hook that receives the scores just before softmax)
adds the carried scores. Residual logits add no parameters, so checkpoints of the plain encoder
load unchanged (strict), and with ``residual_attention: false`` the module runs NeMo's code exactly.

Select it in YAML::

    model:
      encoder:
        _target_: duet.asr.resmha.ResidualAttentionConformerEncoder
        residual_attention: true
        ...  # every ConformerEncoder key

NeMo 3 instantiates a config's ``_target_`` only from an allow-list of namespaces (``nemo.``,
``torch.nn.``, ...), checked before the class is imported. Importing this module adds this one class
path to that list (the way NeMo lists single classes such as ``nemo_text_processing``'s Normalizer), so
a process must ``import duet.asr.resmha`` before it builds or restores a ResMHA model.

Scope: ``self_attention_model`` ``rel_pos`` or ``abs_pos`` with explicit scores
(``use_pytorch_sdpa: false``: SDPA never materialises the scores). After an in-encoder time
reduction (``reduction_position``) the score matrix changes size, so the residual chain restarts
there. A layer skipped by stochastic depth still passes its scores on (NeMo zeroes only its output).
Cache-aware streaming inference is not supported with the option on.
"""

from __future__ import annotations

import torch
from nemo.collections.asr.modules import ConformerEncoder
from nemo.collections.asr.parts.submodules.multi_head_attention import (
    MultiHeadAttention,
    RelPositionMultiHeadAttention,
)
from nemo.core.classes import common as nemo_common

__all__ = [
    "ResidualAttentionConformerEncoder",
    "ResidualMultiHeadAttention",
    "ResidualRelPositionMultiHeadAttention",
    "ResidualScores",
]


class ResidualScores:
    """The pre-softmax scores of the last attention layer run, shared by the layers of one encoder."""

    def __init__(self) -> None:
        self.previous: torch.Tensor | None = None

    def reset(self) -> None:
        self.previous = None


class _ResidualScoresMixin:
    """Adds the previous layer's pre-softmax scores to this layer's before NeMo's masked softmax.

    The carried scores are the raw (unmasked) sums: NeMo masks a copy inside ``forward_attention``,
    so padded positions never accumulate ``-inf`` and are masked again in every layer.
    """

    residual_scores: ResidualScores

    def forward_attention(self, value, scores, mask):
        previous = self.residual_scores.previous
        if previous is not None:
            scores = scores + previous
        self.residual_scores.previous = scores
        return super().forward_attention(value, scores, mask)


class ResidualRelPositionMultiHeadAttention(_ResidualScoresMixin, RelPositionMultiHeadAttention):
    """NeMo's Transformer-XL relative-position attention with residual attention logits."""


class ResidualMultiHeadAttention(_ResidualScoresMixin, MultiHeadAttention):
    """NeMo's absolute-position attention with residual attention logits."""


_RESIDUAL_CLASS = {
    RelPositionMultiHeadAttention: ResidualRelPositionMultiHeadAttention,
    MultiHeadAttention: ResidualMultiHeadAttention,
}


class ResidualAttentionConformerEncoder(ConformerEncoder):
    """NeMo ``ConformerEncoder`` with optional residual attention logits (ResMHA) across its layers.

    Args:
        residual_attention: add each layer's pre-softmax attention scores to the next layer's.
            False = NeMo's ``ConformerEncoder`` unchanged.
        **kwargs: every ``ConformerEncoder`` argument (``n_layers``, ``d_model``, ``subsampling``,
            ``reduction``, ...).
    """

    def __init__(self, *args, residual_attention: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.residual_attention = bool(residual_attention)
        self._residual_scores = ResidualScores()
        if self.residual_attention:
            if self.use_pytorch_sdpa:
                raise ValueError(
                    "residual_attention=true needs explicit attention scores: set use_pytorch_sdpa=false "
                    "(scaled_dot_product_attention never exposes them)"
                )
            if self.self_attention_model not in ("rel_pos", "abs_pos"):
                raise ValueError(
                    f"residual_attention=true supports self_attention_model rel_pos or abs_pos, "
                    f"not {self.self_attention_model!r}"
                )
            self._make_attention_residual()
            if self.reduction_subsampling is not None:
                # The scores' time axes shrink at the reduction: the next layer starts a new chain.
                self.reduction_subsampling.register_forward_hook(lambda *_: self._residual_scores.reset())

    def _make_attention_residual(self) -> None:
        # Re-classing keeps every parameter (including biases shared across layers when
        # untie_biases=false), the state-dict keys and the RNG stream of the plain encoder, so
        # both variants initialise identically for a seed and exchange checkpoints.
        for layer in self.layers:
            attention = layer.self_attn
            residual_class = _RESIDUAL_CLASS.get(type(attention))
            if residual_class is None:
                raise ValueError(f"residual_attention: unsupported attention module {type(attention).__name__}")
            attention.__class__ = residual_class
            attention.residual_scores = self._residual_scores

    def forward_internal(self, audio_signal, length, cache_last_channel=None, *args, **kwargs):
        if not self.residual_attention:
            return super().forward_internal(audio_signal, length, cache_last_channel, *args, **kwargs)
        if cache_last_channel is not None:
            raise ValueError("residual_attention=true does not support cache-aware streaming inference")
        self._residual_scores.reset()
        try:
            return super().forward_internal(audio_signal, length, cache_last_channel, *args, **kwargs)
        finally:
            self._residual_scores.reset()  # do not keep a (B, H, T, T) tensor alive between batches

    def change_attention_model(self, *args, **kwargs):
        """NeMo's method rebuilds the attention modules; re-apply the residual logits to the new ones."""
        super().change_attention_model(*args, **kwargs)
        if self.residual_attention:
            self._make_attention_residual()


def _allow_as_nemo_target(cls: type) -> None:
    # An exact class path, not a package prefix: nothing else under duet.* becomes instantiable.
    path = f"{cls.__module__}.{cls.__qualname__}"
    if path not in nemo_common.ALLOWED_TARGET_PREFIXES:
        nemo_common.ALLOWED_TARGET_PREFIXES.append(path)


_allow_as_nemo_target(ResidualAttentionConformerEncoder)
