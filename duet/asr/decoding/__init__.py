"""CTC decoding as one object: each strategy a module (greedy, beam, beam_lm, joint) with a frozen settings dataclass
whose fields declare their defaults, bounds and help (``options``), registered by name (``registry``); its
``build(model)`` returns the :class:`CtcDecoder` every decode path takes (``duet.asr.inference``).

The command-line flags (``duet.cli.cli_args``), the ``decoding.json`` keys (``duet.asr.decoding.file``) and their
checks are derived from the registered dataclasses, so a strategy registered in one module is reachable from all of
them. Rescorings (Whisper's decoder on a beam's n-best, joint decoding) follow ``rescoring.Rescoring``; the scorer
they use follows ``rescoring.TextScorer`` (``duet.asr.whisper_rescoring.WhisperRescorer``).
"""

import importlib
import pkgutil

from duet.asr.decoding.decoder import CtcDecoder
from duet.asr.decoding.options import DecodingInputError, StrategySettings, option
from duet.asr.decoding.registry import (all_options, decoding_settings, register, settings_from_values, strategies,
                                        strategy_class)

# The built-in strategies register themselves on import, greedy first
from duet.asr.decoding.greedy import GreedySettings, greedy_decoder  # noqa: E402  isort: skip
from duet.asr.decoding.beam import BeamSettings  # noqa: E402  isort: skip
from duet.asr.decoding.beam_lm import BeamLmSettings  # noqa: E402  isort: skip
from duet.asr.decoding.joint import JointSettings  # noqa: E402  isort: skip

#: Any strategy's settings (the type to annotate with)
DecodingSettings = StrategySettings

__all__ = ["BeamLmSettings", "BeamSettings", "CtcDecoder", "DecodingInputError", "DecodingSettings", "GreedySettings",
           "JointSettings", "StrategySettings", "all_options", "build_decoder", "decoding_settings", "greedy_decoder",
           "option", "register", "settings_from_values", "strategies", "strategy_class"]


def build_decoder(model, settings: StrategySettings, reuse: CtcDecoder | None = None) -> CtcDecoder:
    """``settings``' decoder of ``model`` (a NeMo CTC model or its ONNX export), validated first; ``reuse``: a
    decoder built before for the same model, whose Whisper models are taken over instead of read again."""
    return settings.validate().build(model, reuse)


# The built-ins above register themselves on import; so does any other module of this package: a new strategy is
# one file here, found without a line naming it
for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
