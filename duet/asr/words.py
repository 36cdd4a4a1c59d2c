"""Word timestamps and per-word confidence of CTC transcripts, from NeMo's own decoding.

NeMo's CTC decoding computes both when its config asks for them: ``compute_timestamps`` fills
``Hypothesis.timestamp["word"]`` with each word's first and last encoder frame, and a ``confidence_cfg`` with
``preserve_word_confidence`` fills ``Hypothesis.word_confidence``. The confidence is NeMo's ``max_prob`` measure
at alpha 1: the probability of the frame's best token rescaled so that a uniform distribution is 0 and a certain
one 1, over the frames that emit the word's tokens (blanks excluded), the lowest of them (``aggregation: min``).
NeMo's default measure (Tsallis entropy, alpha 0.33, exp normalisation) gave 0.001-0.18 to the words of a
demo-model utterance that this one puts at 0.67 (the word before a deleted one) to 1.0: too low to read.
The times are NeMo's CTC convention: a word ends on the frame that emits its last token and starts where the
word before it ended (the first one a frame before its first token), so consecutive words touch. Frames
become seconds as NeMo's ``model.transcribe(timestamps=True)`` converts them: ``timestamp_utils.
process_timestamp_outputs`` with the encoder's subsampling factor and the feature window stride.

Only greedy decoding has them: NeMo's batched beam search (``beam_batch``, our ``beam`` and ``beam_lm``)
refuses ``compute_timestamps`` and confidence, so under beam search a transcript's ``words`` is None
(the text is the beam's own). The model's decoding is not touched: the word decoding is a second NeMo
decoding object built from the model's decoding config.
"""

from __future__ import annotations

import copy
import functools
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import numpy as np
from omegaconf import OmegaConf

from duet.asr.inference import decode_texts, transcribe_audio, transcribe_files

__all__ = ["TimedTranscript", "Word", "transcribe_files_with_words", "transcribe_with_words", "words_supported"]

# NeMo strategies whose decoding computes timestamps and confidence (duet.asr.decoding sets greedy as greedy_batch)
TIMED_STRATEGIES = ("greedy", "greedy_batch")


@dataclass(frozen=True)
class Word:
    word: str
    start: float  # seconds from the start of the audio handed in
    end: float
    confidence: float  # 0 (unsure) .. 1 (sure)


@dataclass(frozen=True)
class TimedTranscript:
    text: str
    words: list[Word] | None  # None: the decoding (beam search) gives no word times

    def words_json(self) -> list[dict] | None:
        """``words`` as JSON-ready dicts (None stays None)."""
        return None if self.words is None else [asdict(w) for w in self.words]

    def shifted(self, seconds: float) -> "TimedTranscript":
        """The same transcript with every word ``seconds`` later (a piece cut from a longer recording)."""
        if self.words is None:
            return self
        return TimedTranscript(self.text, [Word(w.word, round(w.start + seconds, 3), round(w.end + seconds, 3),
                                                w.confidence) for w in self.words])


def words_supported(model) -> bool:
    """Whether ``model``'s current CTC decoding gives word times (greedy does, beam search does not)."""
    return model.cfg.decoding.strategy in TIMED_STRATEGIES


def word_decoding(model):
    """A NeMo CTC decoding like the model's, computing word timestamps and confidence (None under beam search)."""
    # NeMo takes ~21 s to import: only the calls that use it pay for it
    from nemo.collections.asr.parts.submodules.ctc_decoding import CTCBPEDecoding, CTCDecoding

    if not words_supported(model):
        return None
    # merged, not assigned: the config may be NeMo's structured CTCDecodingConfig, whose confidence_cfg is typed
    cfg = copy.deepcopy(model.cfg.decoding)
    OmegaConf.set_struct(cfg, False)  # a .nemo's plain config may lack the keys
    cfg = OmegaConf.merge(cfg, {"compute_timestamps": True, "confidence_cfg": {
        "preserve_frame_confidence": True, "preserve_word_confidence": True, "aggregation": "min",
        "method_cfg": {"name": "max_prob", "alpha": 1.0}}})
    if isinstance(model.decoding, CTCBPEDecoding):
        return CTCBPEDecoding(decoding_cfg=cfg, tokenizer=model.tokenizer)
    return CTCDecoding(decoding_cfg=cfg, vocabulary=copy.deepcopy(model.decoder.vocabulary))


def decode_timed(model, log_probs, lengths, decoding=None) -> list[TimedTranscript]:
    """One batch as :class:`TimedTranscript` (a ``duet.asr.inference.BatchDecoder`` once ``decoding`` is bound:
    :func:`word_decoding`, or None for text alone)."""
    # NeMo takes ~21 s to import (a loaded model has paid it already; importing this module must not)
    from nemo.collections.asr.parts.utils.timestamp_utils import process_timestamp_outputs

    if decoding is None:
        return [TimedTranscript(text, None) for text in decode_texts(model, log_probs, lengths)]
    hyps = decoding.ctc_decoder_predictions_tensor(log_probs, decoder_lengths=lengths, return_hypotheses=True)
    hyps = process_timestamp_outputs(hyps, model.encoder.subsampling_factor, model.cfg.preprocessor.window_stride)
    return [_timed(hyp) for hyp in hyps]


def _timed(hyp) -> TimedTranscript:
    offsets = hyp.timestamp.get("word", []) if isinstance(hyp.timestamp, dict) else []
    # a lone word-boundary piece ("▁") decodes to a double space: NeMo times it as an empty word but gives it no
    # confidence (it is no word)
    offsets = [o for o in offsets if o["word"].strip()]
    confidence = list(hyp.word_confidence or [])
    if len(confidence) != len(offsets):  # NeMo splits both by the same tokens; say so loudly if not
        raise RuntimeError(f"NeMo gave {len(offsets)} word times but {len(confidence)} word confidences "
                           f"for {hyp.text!r}")
    words = [Word(o["word"], round(float(o["start"]), 3), round(float(o["end"]), 3), round(float(c), 4))
             for o, c in zip(offsets, confidence)]
    return TimedTranscript(hyp.text, words)


def transcribe_with_words(model, audios: Sequence[np.ndarray], batch_size: int = 16, progress: bool = False,
                          workers: int | None = None) -> list[TimedTranscript]:
    """Transcripts with word times of mono float32 arrays at the model's rate, in input order: the batching of
    ``duet.asr.inference.transcribe_audio``, the same text as it gives; ``words`` None under beam search."""
    decode = functools.partial(decode_timed, decoding=word_decoding(model))
    return transcribe_audio(model, audios, batch_size=batch_size, progress=progress, workers=workers, decode=decode)


def transcribe_files_with_words(model, paths: Sequence[str | Path], batch_size: int = 16, progress: bool = False,
                                workers: int | None = None) -> list[TimedTranscript]:
    """:func:`transcribe_with_words` of audio files (read batch by batch as ``transcribe_files`` does)."""
    decode = functools.partial(decode_timed, decoding=word_decoding(model))
    return transcribe_files(model, paths, batch_size=batch_size, progress=progress, workers=workers, decode=decode)
