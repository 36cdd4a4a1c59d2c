"""What a beam's rescoring works with: the candidates of an utterance, the scorer that reads them against the audio
(:class:`TextScorer`: Whisper tiny.en's decoder, ``duet.asr.whisper_rescoring.WhisperRescorer``, is the one
implementation), and the rescoring a decoder asks for each utterance's choice (:class:`Rescoring`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np
import torch

from duet.asr.decoding.nemo_decoding import blank_past_end, hypothesis_text


@dataclass(frozen=True)
class Candidate:
    """One transcript of a beam's n-best and the beam's score for it (acoustic + LM + length bonus, natural log)."""

    text: str
    beam_score: float
    tokens: tuple[int, ...] = ()  # the CTC token ids of its spoken form: word times align them


#: What an utterance with no candidate is given
NOTHING_HEARD = Candidate("", 0.0)


class TextScorer(Protocol):
    """Reads candidate transcripts against the audio: log P(text | audio) for each."""

    sample_rate: int  # what the waveforms must be sampled at

    def log_likelihoods(self, waveform: np.ndarray, texts: Sequence[str]) -> list[float]: ...

    def encoded_log_likelihoods(self, encoding: torch.Tensor, texts: Sequence[str]) -> list[float]: ...


class BeamNbest:
    """A batch's beam n-best, searched when asked and for the utterances asked: a rescoring that settles some
    utterances without the beam's candidates (joint decoding's veto and sure cases) spares their search."""

    def __init__(self, nemo_decoding, log_probs: torch.Tensor, lengths: torch.Tensor):
        self.nemo_decoding, self.log_probs, self.lengths = nemo_decoding, log_probs, lengths

    def __len__(self) -> int:
        return int(self.lengths.shape[0])

    def of(self, rows: Sequence[int]) -> list[list[Candidate]]:
        """The n-best of the batch's utterances ``rows``, in that order (each searched as in the whole batch)."""
        if not rows:
            return []
        index = torch.as_tensor(list(rows), dtype=torch.long)
        return nbest_candidates(self.nemo_decoding, self.log_probs[index], self.lengths[index])

    def all(self) -> list[list[Candidate]]:
        return self.of(range(len(self)))


class Rescoring(Protocol):
    """Chooses each utterance's transcript among its beam's n-best (and candidates of its own), with the audio."""

    #: whether it may run in a forked process (CTranslate2's thread pool may not)
    forkable: bool

    def best(self, nbest: BeamNbest, log_probs: torch.Tensor, lengths: torch.Tensor,
             audios: Sequence[np.ndarray]) -> list[Candidate]: ...


def nbest_candidates(nemo_decoding, log_probs: torch.Tensor, lengths: torch.Tensor) -> list[list[Candidate]]:
    """Each utterance's distinct n-best transcripts, best first, from a NeMo beam decoding that keeps its n-best
    (``return_best_hypothesis`` off)."""
    hyps = nemo_decoding.ctc_decoder_predictions_tensor(blank_past_end(log_probs, lengths, nemo_decoding.blank_id),
                                                        decoder_lengths=lengths)
    out = []
    for utterance in hyps:
        # NeMo returns an NBestHypotheses per utterance, or (beam_batch) the list of its hypotheses
        nbest = getattr(utterance, "n_best_hypotheses", utterance if isinstance(utterance, list) else None)
        if nbest is None:
            raise ValueError("the decoding returns one hypothesis per utterance, not its n-best")
        seen: dict[str, Candidate] = {}
        for hyp in nbest:
            text = hypothesis_text(hyp)
            if text not in seen:  # beams that spell the same text: the best (NeMo lists them best first)
                seen[text] = Candidate(text, float(hyp.score), tuple(torch.as_tensor(hyp.y_sequence).tolist()))
        out.append(list(seen.values()))
    return out
