"""Word timestamps and per-word confidence of CTC transcripts, from NeMo's own decoding.

NeMo's CTC decoding computes both when its config asks for them: ``compute_timestamps`` fills
``Hypothesis.timestamp["word"]`` with each word's first and last encoder frame, and a ``confidence_cfg`` with
``preserve_word_confidence`` fills ``Hypothesis.word_confidence``. The confidence is NeMo's ``max_prob`` measure
at alpha 1: the probability of the frame's best token rescaled so that a uniform distribution is 0 and a certain
one 1, over the frames that emit the word's tokens (blanks excluded), the lowest of them (``aggregation: min``).
NeMo's default measure (Tsallis entropy, alpha 0.33, exp normalisation) gave 0.001-0.18 to the words of a
demo-model utterance that this one puts at 0.67 (the word before a deleted one) to 1.0: too low to read.
The times are the frames the word's tokens are emitted on: from the first frame of its first token to the end of
the last frame of its last token. NeMo's own word times give a word the blank frames before it (it starts where the
word before it ended), so a word after a pause started up to the whole pause early (RESULTS, "word times").
Frames become seconds as NeMo's ``model.transcribe(timestamps=True)`` converts them (``timestamp_utils.
process_timestamp_outputs``): the encoder's subsampling factor times the feature window stride.

Greedy decoding has them from NeMo itself. NeMo's batched beam search (``beam_batch``, our ``beam`` and
``beam_lm``) refuses ``compute_timestamps`` and confidence, so there the beam's own tokens are force-aligned to the
same batch's CTC log-probabilities (no second encoder pass) with the NeMo Forced Aligner's Viterbi
(``aligner_utils.viterbi_decoding``): the most likely CTC path that spells exactly those tokens. That path is then
read by the same greedy word decoding, run on the log-probabilities with every label but the path's masked at each
frame: its argmax is the path, so NeMo's own code splits it into words, times them in the convention above and
computes the confidence. The confidence is thus the same max_prob formula, min over the frames of the word's
tokens, but of the *aligned* token's probability rather than the frame's best one: on the greedy path the two are
the same number (a beam transcript equal to greedy's gets greedy's words, times and confidences), and where the
beam (its LM) wrote a token the acoustic model did not prefer, the word reads unsure (down to 0: below a uniform
distribution's probability the formula goes negative, clipped) instead of borrowing the confidence of the token it
replaced. Where the decoding rescores the beam's n-best with Whisper's decoder (``duet.asr.whisper_rescoring``), the
candidate it chose is the one aligned, so its words keep times and confidences. The model's decoding is not
touched: the word decoding is a second NeMo decoding object, greedy, built from the model's decoding config.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Sequence

import torch

from duet.foundation.token_rows import pad_token_rows
from duet.text import normalize_spoken

__all__ = ["TimedTranscript", "Word", "formatted_words", "timed_transcripts"]

# NFA's stand-in for "impossible" in its Viterbi (aligner_utils.viterbi_decoding's default padding_value)
IMPOSSIBLE = -3.4e38


@dataclass(frozen=True)
class Word:
    word: str
    start: float  # seconds from the start of the audio handed in
    end: float
    confidence: float  # 0 (unsure) .. 1 (sure)


@dataclass(frozen=True)
class TimedTranscript:
    text: str
    words: list[Word] | None  # None: no word times

    def words_json(self) -> list[dict] | None:
        """``words`` as JSON-ready dicts (None stays None)."""
        return None if self.words is None else [asdict(w) for w in self.words]

    def shifted(self, seconds: float) -> "TimedTranscript":
        """The same transcript with every word ``seconds`` later (a piece cut from a longer recording)."""
        if self.words is None:
            return self
        return TimedTranscript(self.text, [Word(w.word, round(w.start + seconds, 3), round(w.end + seconds, 3),
                                                w.confidence) for w in self.words])


def timed_transcripts(model, word_decoding, log_probs, lengths, texts: Sequence[str] | None,
                      tokens: Sequence | None) -> list[TimedTranscript]:
    """One batch's transcripts with word times and confidences: ``word_decoding`` (NeMo's greedy decoding with
    timestamps and confidence, ``duet.asr.decoding.nemo_decoding.word_decoding``) reads greedy's words from the
    log-probabilities themselves (``texts`` None), or the words of ``texts`` from the CTC path that spells their
    ``tokens`` (a beam's or a rescoring's choice: the module doc)."""
    # NeMo takes ~21 s to import (a loaded model has paid it already; importing this module must not)
    from nemo.collections.asr.parts.utils.timestamp_utils import process_timestamp_outputs

    if texts is not None:
        log_probs = aligned_log_probs(log_probs, lengths, tokens, word_decoding.blank_id)
    hyps = word_decoding.ctc_decoder_predictions_tensor(log_probs, decoder_lengths=lengths, return_hypotheses=True)
    hyps = process_timestamp_outputs(hyps, model.encoder.subsampling_factor, model.cfg.preprocessor.window_stride)
    frame_seconds = float(model.encoder.subsampling_factor) * float(model.cfg.preprocessor.window_stride)
    paths = log_probs.argmax(-1).cpu()  # greedy's path, or (masked) the aligned one: what NeMo's decoding read
    timed = [_timed(hyp, paths[b, : int(lengths[b])], word_decoding.blank_id, frame_seconds)
             for b, hyp in enumerate(hyps)]
    if texts is None:
        return timed
    # the path spells the beam's tokens, so its words are the beam's; the text stays the beam's own (a joint
    # decoding's choice keeps Whisper's formatting: its words are then the formatted ones, timed by what they spell)
    return [TimedTranscript(text, formatted_words(text, t.words)) for text, t in zip(texts, timed)]


def formatted_words(text: str, spoken: list[Word] | None) -> list[Word] | None:
    """``spoken`` (the words of ``text``'s spoken form, as the CTC model spells and times them) as the words of
    ``text`` as written ("It costs $5." -> "It", "costs", "$5."): each written word takes the span of the spoken words
    it reads as ("$5." -> "five dollars") and their lowest confidence; a written word that says nothing ("-") is
    left out. ``spoken`` as it is when the two do not line up (or ``text`` is already its spoken form)."""
    if not spoken or normalize_spoken(text) == text:
        return spoken
    out, k = [], 0
    for written in text.split():
        said = normalize_spoken(written).split()
        if not said:
            continue
        if [w.word for w in spoken[k : k + len(said)]] != said:
            return spoken
        span = spoken[k : k + len(said)]
        out.append(Word(written, span[0].start, span[-1].end, min(w.confidence for w in span)))
        k += len(said)
    return out if k == len(spoken) else spoken


def aligned_log_probs(log_probs, lengths, token_ids: Sequence, blank_id: int):
    """``log_probs`` [B, T, V] with every label but the CTC forced-alignment path of ``token_ids[b]`` (each
    utterance's tokens, no blanks) at the floor, so that greedy decoding reads that path and each frame's best
    log-prob is the aligned label's: NeMo's Viterbi (NFA's ``viterbi_decoding``) finds the path."""
    # NeMo takes ~21 s to import (a loaded model has paid it already; importing this module must not)
    from nemo.collections.asr.parts.utils.aligner_utils import viterbi_decoding

    batch, frames, labels = log_probs.shape
    device = log_probs.device
    # NFA's layout: each utterance's targets as blank, t1, blank, t2, ..., blank, padded with the label V (a
    # column it adds at IMPOSSIBLE); frames past an utterance's length at IMPOSSIBLE too
    targets = [[blank_id] + [x for token in torch.as_tensor(ids).tolist() for x in (token, blank_id)]
               for ids in token_ids]
    target_lengths = torch.tensor([len(t) for t in targets])
    padded_targets, _ = pad_token_rows(targets, labels)
    lengths = lengths.to(device)
    past_end = torch.arange(frames, device=device)[None, :] >= lengths[:, None]
    padded = log_probs.float().masked_fill(past_end[:, :, None], IMPOSSIBLE)
    positions = viterbi_decoding(padded, padded_targets, lengths.cpu(), target_lengths, viterbi_device=device)
    path = torch.full((batch, frames), blank_id, dtype=torch.long)
    for b, (t, p) in enumerate(zip(targets, positions)):
        path[b, : len(p)] = torch.tensor(t)[p]
    path = path.to(device)[:, :, None]
    masked = torch.full_like(log_probs, float("-inf"))
    return masked.scatter_(2, path, log_probs.gather(2, path))


def token_runs(path: torch.Tensor, blank_id: int) -> list[tuple[int, int]]:
    """The first and last frame of each token a CTC path emits (a run of one label between blanks or other labels:
    CTC's collapse), in order."""
    runs: list[tuple[int, int]] = []
    previous = blank_id
    for frame, label in enumerate(path.tolist()):
        if label != blank_id and label == previous:
            runs[-1] = (runs[-1][0], frame)
        elif label != blank_id:
            runs.append((frame, frame))
        previous = label
    return runs


def _timed(hyp, path: torch.Tensor, blank_id: int, frame_seconds: float) -> TimedTranscript:
    offsets = hyp.timestamp.get("word", []) if isinstance(hyp.timestamp, dict) else []
    tokens = hyp.timestamp.get("char", []) if isinstance(hyp.timestamp, dict) else []
    confidence = list(hyp.word_confidence or [])
    # a lone word-boundary piece ("▁") decodes to a double space: NeMo times it as an empty word but gives it no
    # confidence (it is no word)
    kept = [(k, o) for k, o in enumerate(offsets) if o["word"].strip()]
    if len(confidence) != len(kept):  # NeMo splits both by the same tokens; say so loudly if not
        raise RuntimeError(f"NeMo gave {len(kept)} word times but {len(confidence)} word confidences "
                           f"for {hyp.text!r}")
    spans = _emitted_spans(offsets, tokens, token_runs(path, blank_id), frame_seconds)
    # clipped: a force-aligned token less likely than uniform reads below 0 (module doc); greedy's never does
    words = [Word(o["word"], *spans.get(k, (round(float(o["start"]), 3), round(float(o["end"]), 3))),
                  round(min(1.0, max(0.0, float(c))), 4)) for (k, o), c in zip(kept, confidence)]
    return TimedTranscript(hyp.text, words)


def _emitted_spans(words: list[dict], tokens: list[dict], runs: list[tuple[int, int]],
                   frame_seconds: float) -> dict[int, tuple[float, float]]:
    """Each word's span (seconds) from the first frame its first token is emitted on to the end of the last frame
    its last token is emitted on, by the word's index in NeMo's ``words``. NeMo's own convention (the module doc)
    gives a word the blank frames before it, so after a pause it starts when the word before it ended; the
    emitted frames alone put it where the model heard it. Empty when NeMo's tokens and the path's do not line up."""
    if len(tokens) != len(runs):
        return {}
    spans, k = {}, 0
    for index, word in enumerate(words):
        inside = []
        while k < len(tokens) and int(tokens[k]["end_offset"]) <= int(word["end_offset"]):
            inside.append(k)
            k += 1
        if inside:
            first, last = runs[inside[0]][0], runs[inside[-1]][1]
            spans[index] = (round(first * frame_seconds, 3), round((last + 1) * frame_seconds, 3))
    return spans
