"""Greedy CTC decoding (NeMo's ``greedy_batch``): each frame's most likely token; word times and confidences from
NeMo itself."""

from __future__ import annotations

from dataclasses import dataclass

from duet.asr.decoding.decoder import CtcDecoder
from duet.asr.decoding.nemo_decoding import greedy_config
from duet.asr.decoding.options import StrategySettings
from duet.asr.decoding.registry import register


@register
@dataclass(frozen=True)
class GreedySettings(StrategySettings):
    strategy = "greedy"
    summary = "each frame's most likely token"

    def build(self, model, reuse=None) -> CtcDecoder:
        return CtcDecoder(model, self, greedy_config(model))


def greedy_decoder(model) -> CtcDecoder:
    """The decoder of a path that was given none: greedy (as NeMo's own ``transcribe()`` decodes by default)."""
    return GreedySettings().build(model)
