"""Label-synchronous joint decoding: Whisper tiny.en's beam search, token by token, with the fine-tuned CTC model's
prefix score in every hypothesis's score (ESPnet's hybrid CTC/attention beam search).

The two models spell with different vocabularies, so the CTC model reads a hypothesis's text: after each token, the
spoken form of its text so far (the CTC model's spelling, :func:`duet.text.normalize_spoken`; a word still being
written is spelt as it stands) gets its CTC prefix probability — the probability that the CTC output begins with
those tokens, summed over every alignment (:class:`CtcPrefixScores`). A hypothesis scores ::

    (1 - ctc_weight) x log P_whisper(tokens so far | audio) + ctc_weight x log P_ctc-prefix(its text so far)

and a finished one the CTC model's full probability of its text instead of the prefix's. (Scoring complete words
only, at word boundaries, let hypotheses that never start a new word escape the CTC model: "EASFISTSwereOfTwoKines".)
The n-best texts it finds are judged like the other proposals (``duet.asr.decoding.joint``). Measured against the
rescoring of CTranslate2's own beam (RESULTS.md, "Joint decoding"): worse on the held-in dev set, so not the
demo's decoding.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch

from duet.asr.whisper_gpt2 import END_OF_TEXT, WHISPER_PREFIX, WhisperTextDecoder

NEGATIVE_INFINITY = float("-inf")


class CtcPrefixScores:
    """CTC prefix and full log-probabilities of token sequences on one utterance's log-probabilities [T, V]
    (its own frames only), each sequence's forward variables computed once from its prefix's and kept.

    For a sequence h = g + c, with r_t^n(h) / r_t^b(h) the probability that the first t frames spell h ending in a
    label / in blank, and phi_t(g) = r_t^b(g) + r_t^n(g) (r_t^b(g) alone where g ends in c)::

        P(h is a prefix of the output) = sum_t phi_{t-1}(g) p_t(c)
        r_t^n(h) = (r_{t-1}^n(h) + phi_{t-1}(g)) p_t(c),   r_t^b(h) = (r_{t-1}^b(h) + r_{t-1}^n(h)) p_t(blank)

    Both recurrences are linear in t, so each is one cumulative log-sum-exp over the frames (no loop over t).
    """

    def __init__(self, log_probs: torch.Tensor, blank_id: int):
        self.log_probs = log_probs.double()
        frames = self.log_probs.shape[0]
        zero = torch.zeros(1, dtype=torch.float64)
        self.blank_sums = torch.cat([zero, self.log_probs[:, blank_id].cumsum(0)])  # log prod_{u<=t} p_u(blank)
        self.forward: dict[tuple[int, ...], tuple[torch.Tensor, torch.Tensor]] = {
            (): (torch.full((frames + 1,), NEGATIVE_INFINITY, dtype=torch.float64), self.blank_sums)}
        self.prefixes: dict[tuple[int, ...], float] = {(): 0.0}

    def prefix(self, tokens: Sequence[int]) -> float:
        """log P(the CTC output begins with ``tokens``)."""
        tokens = tuple(tokens)
        if tokens not in self.prefixes:
            self._extend(tokens)
        return self.prefixes[tokens]

    def full(self, tokens: Sequence[int]) -> float:
        """log P(the CTC output is ``tokens``): every alignment over all the frames."""
        tokens = tuple(tokens)
        if tokens not in self.forward:
            self._extend(tokens)
        label, blank = self.forward[tokens]
        return float(torch.logaddexp(label[-1], blank[-1]))

    def _extend(self, tokens: tuple[int, ...]) -> None:
        if tokens[:-1] not in self.forward:
            self._extend(tokens[:-1])
        label_g, blank_g = self.forward[tokens[:-1]]
        c = tokens[-1]
        phi = blank_g if len(tokens) > 1 and tokens[-2] == c else torch.logaddexp(blank_g, label_g)
        p_c = self.log_probs[:, c]
        self.prefixes[tokens] = float(torch.logsumexp(phi[:-1] + p_c, 0))
        label_sums = torch.cat([torch.zeros(1, dtype=torch.float64), p_c.cumsum(0)])  # log prod_{u<=t} p_u(c)
        head = torch.full((1,), NEGATIVE_INFINITY, dtype=torch.float64)
        label = torch.cat([head, label_sums[1:] + torch.logcumsumexp(phi[:-1] - label_sums[:-1], 0)])
        blank = torch.cat([head, self.blank_sums[1:] + torch.logcumsumexp(label[:-1] - self.blank_sums[:-1], 0)])
        self.forward[tokens] = (label, blank)


@dataclass(frozen=True)
class WhisperVocabulary:
    """What the search needs of Whisper's vocabulary: which tokens may never be written (faster-whisper's suppressed
    symbols, every special and timestamp token), and the text of a token sequence."""

    suppressed: torch.Tensor  # [V] bool
    blank_start: tuple[int, ...]  # not the first token: a bare space, the end of transcript (suppress_blank)
    decode: Callable[[Sequence[int]], str]


@dataclass
class _Hypothesis:
    tokens: tuple[int, ...]  # Whisper's text tokens so far
    whisper: float  # log P_whisper(tokens | audio)
    ctc: float  # the CTC prefix log-probability of its text's spoken form
    score: float  # what the beam ranks by


def guided_beam_search(decoder: WhisperTextDecoder, encoding: torch.Tensor, ctc: CtcPrefixScores,
                       spell: Callable[[str], Sequence[int]], vocabulary: WhisperVocabulary, beam_size: int,
                       ctc_weight: float, max_tokens: int) -> list[str]:
    """The texts of Whisper's beam search on ``encoding`` [1, S, D] with the CTC prefix score of each hypothesis's
    text (module doc), best first, distinct. ``spell``: the CTC model's tokens of a text's spoken form. A beam ends when
    ``beam_size`` hypotheses have finished (CTranslate2's patience 1) or after ``max_tokens`` tokens."""
    def combined(whisper: float, ctc_score: float) -> float:
        return (1 - ctc_weight) * whisper + ctc_weight * ctc_score

    log_probs, cache = decoder.step(torch.tensor([WHISPER_PREFIX]), decoder.cache_for(encoding))
    live, finished = [_Hypothesis((), 0.0, 0.0, 0.0)], []
    for step in range(max_tokens):
        log_probs = log_probs.masked_fill(vocabulary.suppressed, NEGATIVE_INFINITY)
        if step == 0:
            log_probs[:, list(vocabulary.blank_start)] = NEGATIVE_INFINITY
        top_values, top_tokens = log_probs.topk(beam_size + 1, dim=-1)
        candidates = []  # (score, parent row, token, whisper, ctc)
        for row, hypothesis in enumerate(live):
            for value, token in zip(top_values[row].tolist(), top_tokens[row].tolist()):
                whisper = hypothesis.whisper + value
                if token == END_OF_TEXT:
                    ctc_score = ctc.full(spell(vocabulary.decode(hypothesis.tokens)))
                else:
                    ctc_score = ctc.prefix(spell(vocabulary.decode(hypothesis.tokens + (token,))))
                candidates.append((combined(whisper, ctc_score), row, token, whisper, ctc_score))
        candidates.sort(key=lambda c: -c[0])
        kept: list[tuple[int, _Hypothesis]] = []
        for score, row, token, whisper, ctc_score in candidates:
            if len(kept) == beam_size or score == NEGATIVE_INFINITY:  # more tokens than the frames can spell
                break
            parent = live[row]
            if token == END_OF_TEXT:
                finished.append(_Hypothesis(parent.tokens, whisper, ctc_score, score))
            else:
                kept.append((row, _Hypothesis(parent.tokens + (token,), whisper, ctc_score, score)))
        if len(finished) >= beam_size or not kept:
            break
        live = [h for _, h in kept]
        log_probs, cache = decoder.step(torch.tensor([[h.tokens[-1]] for h in live]),
                                        cache.rows(torch.tensor([row for row, _ in kept])))
    if not finished:  # out of tokens or of spellable ones: the live ones end here
        for h in live:
            ctc_score = ctc.full(spell(vocabulary.decode(h.tokens)))
            finished.append(_Hypothesis(h.tokens, h.whisper, ctc_score, combined(h.whisper, ctc_score)))
    finished.sort(key=lambda h: -h.score)
    return list(dict.fromkeys(vocabulary.decode(h.tokens).strip() for h in finished))


def whisper_vocabulary(tokenizer, suppressed: Sequence[int], size: int) -> WhisperVocabulary:
    """The :class:`WhisperVocabulary` of faster-whisper's ``tokenizer`` (``faster_whisper.tokenizer.Tokenizer``)
    over the decoder's ``size`` ids, with faster-whisper's ``suppressed`` symbols."""
    never = torch.zeros(size, dtype=torch.bool)
    never[[i for i in suppressed if 0 <= i < size]] = True
    never[END_OF_TEXT + 1:] = True  # the start, language, task and timestamp tokens: the prompt says no timestamps
    return WhisperVocabulary(never, tuple(tokenizer.encode(" ")) + (END_OF_TEXT,), tokenizer.decode)


class GuidedWhisperProposer:
    """Whisper tiny.en's proposals searched with the CTC model's prefix score (:func:`guided_beam_search`): the
    encoder of ``whisper`` (a ``duet.asr.decoding.joint.WhisperProposer``, CTranslate2), the PyTorch ``decoder``
    step by step. ``spell``: the CTC model's tokens of a text's spoken form."""

    def __init__(self, whisper, decoder: WhisperTextDecoder, spell: Callable[[str], Sequence[int]], blank_id: int,
                 beam_size: int, ctc_weight: float, max_tokens: int):
        self.whisper, self.decoder, self.spell, self.blank_id = whisper, decoder, spell, blank_id
        self.beam_size, self.ctc_weight, self.max_tokens = beam_size, ctc_weight, max_tokens
        self.vocabulary = whisper_vocabulary(whisper.tokenizer, whisper.suppressed, decoder.shape.vocab)

    @torch.no_grad()
    def propose(self, audios: Sequence[np.ndarray], frames: Sequence[torch.Tensor]
                ) -> tuple[list[list[str]], list[torch.Tensor]]:
        """Each 16 kHz waveform's distinct n-best texts, best first, and its encoding [1, S, d_model];
        ``frames``: the CTC model's log-probabilities [T, V] of each."""
        encoded = self.whisper.encode(audios)
        texts = [guided_beam_search(self.decoder, encoded[i], CtcPrefixScores(frames[i], self.blank_id),
                                    self.spell, self.vocabulary, self.beam_size, self.ctc_weight,
                                    min(self.max_tokens, len(frames[i])))
                 for i in range(len(audios))]
        return texts, encoded
