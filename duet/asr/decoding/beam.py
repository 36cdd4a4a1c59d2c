"""CTC beam search (NeMo's ``beam_batch``: ``BatchedBeamCTCComputer``, batched, pure PyTorch, CPU and GPU), and
Whisper tiny.en's decoder rescoring its n-best.

Score of a hypothesis::

    log P_ctc + beta * (number of emitted tokens)        (+ alpha * log P_lm with strategy beam_lm)

NeMo's other beam strategies need packages that are not usable here: ``beam`` needs OpenSeq2Seq's ``ctc_decoders``
(not on PyPI for Python 3.11), ``flashlight`` needs ``flashlight-text``, and ``pyctcdecode`` (word LM) pins
``numpy<2``, which conflicts with the rest of the environment.

A ``whisper_weight`` adds Whisper tiny.en's decoder judging the beam's candidates with the audio
(:class:`BeamRescoring`, the scorer ``duet.asr.whisper_rescoring.WhisperRescorer``): the beam keeps its n-best and
each candidate's score becomes ``beam score + whisper_weight * log P_whisper(candidate | audio)``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
from omegaconf import OmegaConf, open_dict

from duet.asr.decoding.decoder import CtcDecoder
from duet.asr.decoding.options import DecodingInputError, StrategySettings, option
from duet.asr.decoding.registry import register
from duet.asr.decoding.rescoring import NOTHING_HEARD, BeamNbest, Candidate, TextScorer
from duet.asr.whisper_gpt2 import WHISPER_WINDOW_SAMPLES, WhisperGpt2Error
from duet.asr.whisper_rescoring import WhisperRescorer
from duet.asr.whisper_weights import WhisperWeightsError

# Hypotheses this far (log-prob) below the best are pruned
BEAM_THRESHOLD = 20.0


@dataclass(frozen=True)
class CtcBeam(StrategySettings):
    """The options of every strategy built on NeMo's beam search."""

    # beam 8 + LM cost as much CPU as the encoder on the sample; 4 costs ~60 %
    beam_size: int = option(4, "beam width", low=1)
    beta: float = option(0.0, "bonus per emitted token (counters an LM's bias towards short outputs)")
    blank_skip: float = option(0.0, "the beam reads each run of frames where blank is at least this likely as one "
                                    "frame: a faster search, nearly always the same candidates (0: every frame)",
                               low=0, high=1)

    def skipping(self) -> str:
        return f",blank_skip={self.blank_skip:g}" if self.blank_skip else ""


@dataclass(frozen=True)
class WhisperRescored(StrategySettings):
    whisper_weight: float = option(
        0.0, "Whisper tiny.en's decoder rescores the beam's candidates with the audio, its log-likelihood at this "
             "weight (0: off; adds ~0.1-0.2 s to a 5 s clip on one thread)", low=0)

    def rescored(self) -> str:
        return f"+Whisper(w={self.whisper_weight:g})" if self.whisper_weight else ""


@register
@dataclass(frozen=True)
class BeamSettings(WhisperRescored, CtcBeam):  # fields: CtcBeam's, then WhisperRescored's
    strategy = "beam"
    summary = "beam search"

    def describe(self) -> str:
        return f"beam{self.beam_size}" + (f"(b={self.beta:g}{self.skipping()})" if self.beta or self.blank_skip
                                          else "") + self.rescored()

    def build(self, model, reuse=None) -> CtcDecoder:
        return beam_decoder(model, self, None, 0.0, self.whisper_weight, reuse)


def beam_config(model, beam: CtcBeam, lm: str | None, alpha: float, n_best: bool):
    """``model``'s decoding config as NeMo's ``beam_batch`` with ``beam``'s width and bonus and the NeMo token LM
    ``lm`` at ``alpha`` (a copy; the model is not touched). ``n_best``: every beam's hypothesis per utterance."""
    cfg = copy.deepcopy(model.cfg.decoding)
    with open_dict(cfg):
        cfg.strategy = "beam_batch"
        cfg.beam = OmegaConf.merge(cfg.get("beam") or {}, {
            "beam_size": beam.beam_size,
            "return_best_hypothesis": not n_best,
            "beam_threshold": BEAM_THRESHOLD,
            "beam_beta": beam.beta,
            "ngram_lm_model": lm,
            "ngram_lm_alpha": alpha if lm else 0.0,
        })
        # NeMo's default (on) wherever CUDA exists: it captures graphs only for CUDA tensors, so CPU decoding is
        # the same either way. Off without CUDA, where asking for them only logs a "no conditional node support"
        # warning on every build. A decoder built on a CPU machine may decode on a GPU later: set both ways.
        cfg.beam.allow_cuda_graphs = torch.cuda.is_available()
    return cfg


def beam_decoder(model, settings: CtcBeam, lm: str | None, alpha: float, whisper_weight: float,
                 reuse: CtcDecoder | None) -> CtcDecoder:
    """The decoder of a beam strategy: NeMo's beam with the NeMo token LM ``lm``, rescored by Whisper where
    ``whisper_weight`` (reusing the Whisper scorer of ``reuse``: reading it takes seconds)."""
    rescoring = None
    if whisper_weight:
        rescoring = BeamRescoring(whisper_scorer(model, reuse, "whisper_weight"), whisper_weight)
    return CtcDecoder(model, settings, beam_config(model, settings, lm, alpha, n_best=rescoring is not None),
                      rescoring)


def whisper_scorer(model, reuse: CtcDecoder | None, needed_by: str) -> TextScorer:
    """Whisper tiny.en's decoder as a scorer of ``model``'s audio: the one ``reuse`` holds, else read; a
    ``DecodingInputError`` naming ``needed_by`` when its weights cannot be read or it hears another sample rate."""
    scorer = reuse.rescoring.scorer if reuse is not None and reuse.rescoring is not None else _read_whisper(needed_by)
    if int(model.cfg.sample_rate) != scorer.sample_rate:
        raise DecodingInputError(f"{needed_by}: Whisper hears {scorer.sample_rate} Hz audio, the model "
                                 f"{model.cfg.sample_rate} Hz")
    return scorer


def _read_whisper(needed_by: str) -> TextScorer:
    try:
        # each utterance's own length: 30 s windows cost six times as much for 0.8 point (RESULTS.md, "rescoring")
        return WhisperRescorer(pad_to_30s=False)
    except (WhisperGpt2Error, WhisperWeightsError) as e:
        raise DecodingInputError(f"{needed_by} needs Whisper tiny.en's weights: {e}") from None


@dataclass
class BeamRescoring:
    """The beam's n-best rescored: each candidate's beam score + ``weight`` x the scorer's log-likelihood of it."""

    scorer: TextScorer
    weight: float
    forkable = True

    def best(self, nbest: BeamNbest, log_probs: torch.Tensor, lengths: torch.Tensor,
             audios: Sequence[np.ndarray]) -> list[Candidate]:
        return [self.choose(audio, candidates) for audio, candidates in zip(audios, nbest.all(), strict=True)]

    def choose(self, waveform: np.ndarray, candidates: Sequence[Candidate]) -> Candidate:
        """The candidate with the best combined score (:data:`NOTHING_HEARD` when there is none); the beam's own
        first choice for audio longer than Whisper's 30 s window, which Whisper would judge by its first 30 s alone
        (the pipeline cuts recordings into shorter pieces)."""
        if not candidates:
            return NOTHING_HEARD
        if len(waveform) > WHISPER_WINDOW_SAMPLES:
            return candidates[0]
        scores = self.scorer.log_likelihoods(waveform, [c.text for c in candidates]) if self.weight \
            else [0.0] * len(candidates)
        return candidates[best_index(candidates, scores, self.weight)]


def best_index(candidates: Sequence[Candidate], whisper: Sequence[float], weight: float) -> int:
    """The candidate whose beam score + ``weight`` x Whisper's log-likelihood is highest (the first on a tie)."""
    scores = [c.beam_score + weight * w for c, w in zip(candidates, whisper, strict=True)]
    return int(np.argmax(scores))
