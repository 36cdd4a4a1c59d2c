"""Switch a loaded NeMo CTC model between greedy decoding and beam search with n-gram LM fusion.

Beam search is NeMo's ``beam_batch`` strategy (``BatchedBeamCTCComputer``): batched, pure PyTorch, runs
on CPU and GPU, and fuses NeMo's ``NGramGPULanguageModel`` read from a *token* ARPA
(``tools/train_ngram_lm.py --unit token``). Score of a hypothesis::

    log P_ctc + alpha * log P_lm + beta * (number of emitted tokens)

NeMo's other LM strategies need packages that are not usable here: ``beam`` needs OpenSeq2Seq's
``ctc_decoders`` (not on PyPI for Python 3.11), ``flashlight`` needs ``flashlight-text``, and
``pyctcdecode`` (word LM) pins ``numpy<2`` which conflicts with the rest of the environment.

A ``whisper_weight`` adds Whisper tiny.en's decoder judging the beam's candidates with the audio
(``duet.asr.whisper_rescoring``): the beam keeps its n-best and the model carries the rescoring beside NeMo's decoding
(``duet.asr.inference.rescoring_of``), which the decode paths below ask for each utterance's transcript.

After ``set_decoding`` every NeMo decode path of the model uses it: ``duet.asr.inference`` (which calls
``model.decoding.ctc_decoder_predictions_tensor``) as well as ``model.transcribe`` (which knows nothing of the
rescoring: with a ``whisper_weight`` it returns each utterance's n-best, unrescored). Entry scripts take
the settings as options through ``duet.cli.cli_args`` (``nemo_recipes/evaluate_ctc.py --decoding``,
``tools/pipeline.py --asr-decoding``), and a model's saved choice through ``duet.cli.decoding_file``.
"""

from __future__ import annotations

import copy
import logging
import math
from dataclasses import dataclass
from pathlib import Path

import torch
from omegaconf import OmegaConf, open_dict

from duet.asr.batching import OfflineBatching
from duet.asr.inference import RESCORING_ATTRIBUTE, audio_length, decode_texts, load_audio, rescoring_of
from duet.asr.whisper_weights import WhisperWeightsError
from duet.errors import DuetError
from duet.asr.ngram import load_token_lm, nemo_token_lm, read_lm_info
from duet.asr.whisper_gpt2 import WhisperGpt2Error
from duet.asr.whisper_joint import JointDecoding, JointWeights, WhisperProposer
from duet.asr.whisper_rescoring import BeamRescoring, WhisperRescorer

log = logging.getLogger(__name__)

# The settings each strategy reads, the one table of them: the command line (duet.cli.cli_args) and decoding.json
# (duet.cli.decoding_file) refuse a value the chosen strategy would ignore, and decoding.json saves these alone.
STRATEGY_FIELDS = {"greedy": (), "beam": ("beam_size", "beta", "whisper_weight"),
                   "beam_lm": ("beam_size", "beta", "ngram_lm", "alpha", "whisper_weight"),
                   "joint": ("beam_size", "beta", "ngram_lm", "alpha", "whisper_beam", "ctc_weight", "lm_weight",
                             "token_bonus", "whisper_sure", "spoken_share")}
STRATEGIES = tuple(STRATEGY_FIELDS)
#: The strategies built on NeMo's beam search (all but greedy)
BEAM_STRATEGIES = tuple(s for s in STRATEGIES if s != "greedy")


class DecodingInputError(DuetError, ValueError):
    """Bad decoding settings (missing LM file, LM built for another tokenizer): one line, no stack trace."""


@dataclass(frozen=True)
class DecodingSettings:
    """What to decode with. ``beam`` is beam search without an LM; ``beam_lm`` fuses ``ngram_lm``; ``joint`` lets
    Whisper tiny.en's beam search propose beside that beam and the CTC model judge (``duet.asr.whisper_joint``)."""

    strategy: str = "greedy"
    beam_size: int = 4  # beam 8 + LM cost as much CPU as the encoder on the sample; 4 costs ~60 %
    ngram_lm: str | None = None  # token ARPA from tools/train_ngram_lm.py --unit token
    alpha: float = 0.5  # LM weight (natural-log LM score times alpha)
    beta: float = 0.0  # bonus per emitted token; counters the LM's bias towards short outputs
    beam_threshold: float = 20.0  # hypotheses this far (log-prob) below the best are pruned
    # Whisper tiny.en's decoder rescores the beam's n-best (duet.asr.whisper_rescoring): each candidate's beam score plus
    # this weight times Whisper's log-likelihood of it given the audio; 0 keeps the beam's own choice
    whisper_weight: float = 0.0
    # joint: Whisper's beam width (and n-best), and how the judge adds up a candidate's scores beside Whisper's own
    # log-likelihood: the CTC log-likelihood of its spoken form, the n-gram LM's, a bonus per CTC token
    whisper_beam: int = 5
    ctc_weight: float = 0.3
    lm_weight: float = 0.0
    token_bonus: float = 0.0
    # joint: Whisper's first hypothesis is kept unjudged when its log-likelihood per written word is above this (<= 0;
    # 0: always judged)
    whisper_sure: float = 0.0
    # joint: the share of Whisper's log-likelihood read from a candidate's spoken form (lower case, numbers in words,
    # as the CTC beam writes its candidates) rather than from its text as written
    spoken_share: float = 0.0

    def validate(self) -> None:
        """Raise ``DecodingInputError`` for an unknown strategy, a beam narrower than 1, beam_lm without an LM, or a
        whisper_weight that is negative, not finite or given to greedy decoding (whether the LM fits a model is
        checked when it is applied: :func:`decoding_config`)."""
        if self.strategy not in STRATEGIES:
            raise DecodingInputError(f"unknown decoding strategy {self.strategy!r}; choose from {STRATEGIES}")
        if self.beam_size < 1:
            raise DecodingInputError(f"beam_size must be >= 1, got {self.beam_size}")
        if self.strategy == "beam_lm" and not self.ngram_lm:
            raise DecodingInputError("strategy beam_lm needs an n-gram LM: pass ngram_lm=<token ARPA>")
        if self.whisper_beam < 1:
            raise DecodingInputError(f"whisper_beam must be >= 1, got {self.whisper_beam}")
        for name in ("ctc_weight", "lm_weight", "token_bonus"):
            value = getattr(self, name)
            if not math.isfinite(value) or (name != "token_bonus" and value < 0):
                rule = "a finite number" + ("" if name == "token_bonus" else " >= 0")
                raise DecodingInputError(f"{name} must be {rule}, got {value}")
        if not 0 <= self.spoken_share <= 1:  # NaN fails too
            raise DecodingInputError(f"spoken_share must be a number in 0..1, got {self.spoken_share}")
        if not (math.isfinite(self.whisper_sure) and self.whisper_sure <= 0):
            raise DecodingInputError(f"whisper_sure must be a finite number <= 0, got {self.whisper_sure}")
        if self.strategy == "joint" and self.lm_weight and not self.ngram_lm:
            raise DecodingInputError("lm_weight scores candidates with the n-gram LM: pass ngram_lm=<token ARPA>")
        if not (self.whisper_weight >= 0 and math.isfinite(self.whisper_weight)):  # NaN fails both
            raise DecodingInputError(f"whisper_weight must be a finite number >= 0, got {self.whisper_weight}")
        if self.whisper_weight and self.strategy == "greedy":
            raise DecodingInputError("whisper_weight rescores a beam's candidates: use strategy beam or beam_lm")

    def used_values(self) -> dict:
        """The values this strategy reads (``STRATEGY_FIELDS``), by field name."""
        return {name: getattr(self, name) for name in STRATEGY_FIELDS[self.strategy]}

    def describe(self) -> str:
        if self.strategy == "greedy":
            return "greedy"
        rescored = f"+Whisper(w={self.whisper_weight:g})" if self.whisper_weight else ""
        if self.strategy == "beam":
            return f"beam{self.beam_size}" + (f"(b={self.beta:g})" if self.beta else "") + rescored
        if self.strategy == "joint":
            beam = f"beam{self.beam_size}" + (f"+LM(a={self.alpha:g},b={self.beta:g})" if self.ngram_lm else "")
            sure = (f",sure={self.whisper_sure:g}" if self.whisper_sure else "") + \
                (f",spoken={self.spoken_share:g}" if self.spoken_share else "")
            return (f"joint(Whisper beam{self.whisper_beam} + CTC {beam}; ctc={self.ctc_weight:g},"
                    f"lm={self.lm_weight:g},bonus={self.token_bonus:g}{sure})")
        return f"beam{self.beam_size}+LM(a={self.alpha:g},b={self.beta:g})" + rescored


def ignored_fields(strategy: str, given) -> list[str]:
    """The fields among ``given`` (names of ``DecodingSettings`` fields) that ``strategy`` does not read."""
    return [name for name in given if name not in STRATEGY_FIELDS[strategy]]


def _lm_for_beam_batch(path: str, model) -> str:
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


def decoding_config(model, settings: DecodingSettings, n_best: bool = False):
    """The model's decoding config with ``settings`` applied (a copy; the model is not touched). ``n_best``: a beam
    search returns every beam's hypothesis per utterance (NeMo's ``NBestHypotheses``), not only the best."""
    settings.validate()
    cfg = copy.deepcopy(model.cfg.decoding)
    with open_dict(cfg):
        if settings.strategy == "greedy":
            cfg.strategy = "greedy_batch"
            return cfg
        cfg.strategy = "beam_batch"
        fused = settings.strategy in ("beam_lm", "joint") and bool(settings.ngram_lm)
        cfg.beam = OmegaConf.merge(cfg.get("beam") or {}, {
            "beam_size": settings.beam_size,
            "return_best_hypothesis": not n_best,
            "beam_threshold": settings.beam_threshold,
            "beam_beta": settings.beta,
            "ngram_lm_model": _lm_for_beam_batch(settings.ngram_lm, model) if fused else None,
            "ngram_lm_alpha": settings.alpha if fused else 0.0,
        })
        # NeMo's default (on) wherever CUDA exists: it captures graphs only for CUDA tensors, so CPU decoding is
        # the same either way. Off without CUDA, where asking for them only logs a "no conditional node support"
        # warning on every strategy change. Set both ways: the model's config keeps the last value, and a model
        # switched on a CPU machine may decode on a GPU later.
        cfg.beam.allow_cuda_graphs = torch.cuda.is_available()
    return cfg


def set_decoding(model, settings: DecodingSettings | None = None, **kwargs) -> DecodingSettings:
    """Switch ``model`` (a NeMo CTC model, or its ONNX export) to ``settings`` (or ``DecodingSettings(**kwargs)``) in
    place; with a ``whisper_weight`` the beam keeps its n-best and the model carries Whisper's rescoring of it, with
    strategy ``joint`` the joint decoding (``duet.asr.whisper_joint.JointDecoding``) that judges it with Whisper's."""
    settings = settings or DecodingSettings(**kwargs)
    settings.validate()
    rescoring = None
    if settings.strategy == "joint":
        rescoring = _joint_decoding(model, settings, getattr(model, RESCORING_ATTRIBUTE, None))
    elif settings.whisper_weight:
        rescoring = _whisper_rescoring(settings.whisper_weight, getattr(model, RESCORING_ATTRIBUTE, None))
        if int(model.cfg.sample_rate) != rescoring.rescorer.encode.sample_rate:
            raise DecodingInputError(f"whisper_weight: Whisper hears {rescoring.rescorer.encode.sample_rate} Hz audio, "
                                     f"the model {model.cfg.sample_rate} Hz")
    model.change_decoding_strategy(decoding_config(model, settings, n_best=rescoring is not None), verbose=False)
    setattr(model, RESCORING_ATTRIBUTE, rescoring)
    log.info("decoding: %s", settings.describe())
    return settings


def _joint_decoding(model, settings: DecodingSettings, current) -> JointDecoding:
    """The joint decoding of ``settings`` for ``model``, reusing the Whisper models ``current`` holds (reading them
    takes seconds)."""
    if int(model.cfg.sample_rate) != 16000:
        raise DecodingInputError(f"strategy joint: Whisper hears 16000 Hz audio, the model {model.cfg.sample_rate} Hz")
    weights = JointWeights(ctc=settings.ctc_weight, lm=settings.lm_weight, token_bonus=settings.token_bonus,
                           whisper=1 - settings.spoken_share, whisper_spoken=settings.spoken_share,
                           whisper_sure=settings.whisper_sure)
    lm = load_token_lm(settings.ngram_lm, int(model.tokenizer.vocab_size)) if settings.lm_weight else None
    try:
        if isinstance(current, JointDecoding) and current.proposer.beam_size == settings.whisper_beam:
            return JointDecoding(current.proposer, current.rescorer, weights, lm)
        rescorer = current.rescorer if isinstance(current, (JointDecoding, BeamRescoring)) else WhisperRescorer()
        threads = max(1, torch.get_num_threads())
        return JointDecoding(WhisperProposer(settings.whisper_beam, settings.whisper_beam, threads), rescorer,
                             weights, lm)
    except (WhisperGpt2Error, WhisperWeightsError) as e:
        raise DecodingInputError(f"strategy joint needs Whisper tiny.en's weights: {e}") from None


def _whisper_rescoring(weight: float, current):
    """Whisper's rescoring at ``weight``, reusing the rescorer ``current`` holds (its weights take seconds to read)."""
    if isinstance(current, (BeamRescoring, JointDecoding)):
        return BeamRescoring(current.rescorer, weight)
    try:
        # each utterance's own length: 30 s windows cost six times as much for 0.8 point (RESULTS.md, "rescoring")
        return BeamRescoring(WhisperRescorer(pad_to_30s=False), weight)
    except (WhisperGpt2Error, WhisperWeightsError) as e:
        raise DecodingInputError(f"whisper_weight needs Whisper tiny.en's weights: {e}") from None


@dataclass
class CachedLogProbs:
    """CTC log-probabilities of a set of files, in length-sorted batches, for re-decoding without the encoder."""

    batches: list[tuple[list[int], "torch.Tensor", "torch.Tensor"]]  # (file indices, log_probs, lengths)
    n_files: int
    paths: list[str] | None = None  # the files, read again where a decoding rescores with the audio
    sample_rate: int = 16000


def compute_log_probs(model, paths, batch_size: int = OfflineBatching.batch_size) -> CachedLogProbs:
    """Run the model once over ``paths`` (longest first, like ``duet.asr.inference.transcribe_files``, and like
    it reading each batch's audio only when the batch runs)."""
    sample_rate = int(model.cfg.sample_rate)
    device = next(model.parameters()).device
    sizes = [audio_length(p, sample_rate) for p in paths]
    order = sorted(range(len(sizes)), key=lambda i: sizes[i], reverse=True)
    batches = []
    model.eval()
    with torch.inference_mode():
        for start in range(0, len(order), batch_size):
            batch = order[start : start + batch_size]
            audios = {i: load_audio(paths[i], sample_rate) for i in batch}
            lengths = torch.tensor([len(audios[i]) for i in batch])
            signal = torch.zeros(len(batch), int(lengths.max()))
            for row, i in enumerate(batch):
                signal[row, : len(audios[i])] = torch.from_numpy(audios[i])
            log_probs, encoded_len, _ = model.forward(input_signal=signal.to(device), input_signal_length=lengths.to(device))
            batches.append((batch, log_probs, encoded_len))
    return CachedLogProbs(batches=batches, n_files=len(paths), paths=[str(p) for p in paths], sample_rate=sample_rate)


def decode_log_probs(model, cached: CachedLogProbs) -> list[str]:
    """Transcripts of cached log-probabilities with the model's current decoding, in input order (a decoding that
    rescores with the audio reads each batch's files again)."""
    texts = [""] * cached.n_files
    rescored = rescoring_of(model) is not None and cached.paths is not None
    for batch, log_probs, lengths in cached.batches:
        audios = [load_audio(cached.paths[i], cached.sample_rate) for i in batch] if rescored else None
        for i, text in zip(batch, decode_texts(model, log_probs, lengths, audios)):
            texts[i] = text
    return texts
