"""The decoder a strategy builds (:class:`CtcDecoder`): one object that turns a batch of CTC log-probabilities (and,
where its rescoring reads it, the audio) into transcripts, with word times and confidences when asked. Every decode
path takes it explicitly (``duet.asr.inference``: torch and ONNX batches, the pipeline, the server, the benches)."""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from duet.asr.decoding.nemo_decoding import (blank_past_end, hypothesis_text, merge_blank_runs, nemo_ctc_decoding,
                                             word_decoding)
from duet.asr.decoding.options import StrategySettings
from duet.asr.decoding.rescoring import BeamNbest, Rescoring
from duet.asr.words import TimedTranscript, timed_transcripts


class CtcDecoder:
    """``settings``' decoding of ``model``'s log-probabilities: NeMo's decoding object built from ``nemo_cfg`` (greedy
    or beam search, owned here, the model untouched), and the ``rescoring`` that chooses among the beam's n-best with
    the audio (Whisper rescoring, joint decoding), or None."""

    def __init__(self, model, settings: StrategySettings, nemo_cfg, rescoring: Rescoring | None = None):
        self.model, self.settings, self.rescoring = model, settings, rescoring
        self.nemo = nemo_ctc_decoding(model, nemo_cfg)
        self._word_decoding = None

    @property
    def forkable(self) -> bool:
        """Whether a forked transcription worker may run it (CTranslate2's thread pool, in joint decoding, may not)."""
        return self.rescoring is None or self.rescoring.forkable

    @property
    def reads_audio(self) -> bool:
        """Whether :meth:`decode` needs each utterance's audio beside its log-probabilities."""
        return self.rescoring is not None

    @property
    def timed_by_nemo(self) -> bool:
        """Whether NeMo's own decoding gives the words their times (greedy); beam search's are force-aligned."""
        return self.nemo.cfg.strategy in ("greedy", "greedy_batch")

    def decode(self, log_probs: torch.Tensor, lengths: torch.Tensor, audios: Sequence[np.ndarray] | None = None,
               words: bool = False) -> list[TimedTranscript]:
        """One padded batch's transcripts (``log_probs`` [B, T, V], ``lengths`` [B]); ``audios``: the batch's
        waveforms, which a rescoring decoder needs; ``words``: with word times and confidences (else ``words`` None).
        """
        if self.rescoring is not None:
            if audios is None:
                raise ValueError(f"{self.settings.describe()} reads each utterance's audio, and this decode path has "
                                 "none: use a decoding that does not rescore")
            chosen = self.rescoring.best(BeamNbest(self.nemo, *self._beam_frames(log_probs, lengths)), log_probs,
                                         lengths, audios)
            texts, tokens = [c.text for c in chosen], [c.tokens for c in chosen]
        elif words and self.timed_by_nemo:
            texts = tokens = None
        else:
            searched, searched_lengths = self._beam_frames(log_probs, lengths)
            hyps = self.nemo.ctc_decoder_predictions_tensor(
                blank_past_end(searched, searched_lengths, self.nemo.blank_id), decoder_lengths=searched_lengths,
                return_hypotheses=words)
            texts = [hypothesis_text(h) for h in hyps]
            tokens = [h.y_sequence for h in hyps] if words else None
        if not words:
            return [TimedTranscript(text, None) for text in texts]
        if self._word_decoding is None:
            self._word_decoding = word_decoding(self.model)
        return timed_transcripts(self.model, self._word_decoding, log_probs, lengths, texts, tokens)

    def _beam_frames(self, log_probs: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The frames a beam search reads: runs of sure blank merged where the settings' ``blank_skip`` asks
        (``duet.asr.decoding.nemo_decoding.merge_blank_runs``); word times still come from every frame."""
        skip = getattr(self.settings, "blank_skip", 0.0)
        return merge_blank_runs(log_probs, lengths, self.nemo.blank_id, skip) if skip else (log_probs, lengths)

    def texts(self, log_probs: torch.Tensor, lengths: torch.Tensor,
              audios: Sequence[np.ndarray] | None = None) -> list[str]:
        """:meth:`decode`'s transcripts as plain text."""
        return [t.text for t in self.decode(log_probs, lengths, audios)]
