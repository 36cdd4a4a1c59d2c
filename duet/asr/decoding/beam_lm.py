"""CTC beam search fused with a token n-gram LM (NeMo's ``beam_batch`` with its ``NGramGPULanguageModel``, read from
a *token* ARPA: ``tools/train_ngram_lm.py --unit token``); score ``log P_ctc + alpha * log P_lm + beta * tokens``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from duet.asr.decoding.beam import CtcBeam, WhisperRescored, beam_decoder
from duet.asr.decoding.decoder import CtcDecoder
from duet.asr.decoding.options import DecodingInputError, NameOf, StrategySettings, option
from duet.asr.decoding.registry import register
from duet.asr.ngram import nemo_token_lm, read_lm_info


@dataclass(frozen=True)
class LmFusion(StrategySettings):
    """The options of a strategy that fuses a token n-gram LM into the beam."""

    ngram_lm: str | None = option(None, "token ARPA (tools/train_ngram_lm.py --unit token, the model's tokenizer)",
                                  flag="--lm", key="lm", path=True)
    alpha: float = option(0.5, "LM weight (natural-log LM score times alpha)", low=0)


@register
@dataclass(frozen=True)
class BeamLmSettings(WhisperRescored, LmFusion, CtcBeam):  # fields in this order's reverse
    strategy = "beam_lm"
    summary = "beam search + token n-gram LM"

    def check(self, name_of: NameOf) -> None:
        if not self.ngram_lm:
            raise DecodingInputError(f"{name_of('strategy')} beam_lm needs {name_of('ngram_lm')} <token ARPA> "
                                     "(tools/train_ngram_lm.py --unit token)")

    def describe(self) -> str:
        return f"beam{self.beam_size}+LM(a={self.alpha:g},b={self.beta:g}{self.skipping()})" + self.rescored()

    def build(self, model, reuse=None) -> CtcDecoder:
        return beam_decoder(model, self, lm_for_beam_batch(self.ngram_lm, model), self.alpha, self.whisper_weight,
                            reuse)


def lm_for_beam_batch(path: str, model) -> str:
    """The ARPA at ``path`` checked against ``model``'s tokenizer, as the NeMo file ``beam_batch`` loads fast."""
    lm = Path(path)
    if not lm.is_file():
        raise DecodingInputError(f"n-gram LM not found: {lm}")
    if lm.suffix != ".arpa":
        raise DecodingInputError(f"beam_batch reads a token ARPA (.arpa), not {lm.name}")
    info = read_lm_info(lm)
    vocab_size = int(model.tokenizer.vocab_size)
    if info is not None:
        if info.get("unit") != "token":
            raise DecodingInputError(f"{lm} is a {info.get('unit')} LM; beam_batch needs --unit token")
        if info.get("vocab_size") not in (None, vocab_size):
            raise DecodingInputError(
                f"{lm} was built for a {info['vocab_size']}-token tokenizer, the model has {vocab_size}: "
                "rebuild it with the model's tokenizer"
            )
    return str(nemo_token_lm(lm, vocab_size))
