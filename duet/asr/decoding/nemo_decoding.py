"""NeMo's CTC decoding objects as a decoder owns them: built from a model's decoding config, never set on the model
(``model.decoding`` stays what the ``.nemo`` restored), and the padding rule every batched NeMo decoding needs."""

from __future__ import annotations

import copy
import math

import torch
from omegaconf import OmegaConf

# A log-probability low enough never to win a beam, yet finite: -inf would turn the beam's sums into NaN
NEVER = -1.0e4


def nemo_ctc_decoding(model, cfg):
    """NeMo's CTC decoding object for ``model`` (a NeMo CTC model or its ONNX export) with config ``cfg``, as
    ``change_decoding_strategy`` would build it, without changing the model."""
    # NeMo takes ~21 s to import: only the calls that use it pay for it
    from nemo.collections.asr.parts.submodules.ctc_decoding import CTCBPEDecoding, CTCDecoding

    if isinstance(model.decoding, CTCBPEDecoding):
        return CTCBPEDecoding(decoding_cfg=cfg, tokenizer=model.tokenizer)
    return CTCDecoding(decoding_cfg=cfg, vocabulary=copy.deepcopy(model.decoder.vocabulary))


def greedy_config(model):
    """``model``'s decoding config as greedy decoding (NeMo's batched greedy)."""
    cfg = copy.deepcopy(model.cfg.decoding)
    OmegaConf.set_struct(cfg, False)
    cfg.strategy = "greedy_batch"
    return cfg


def word_decoding(model):
    """A greedy NeMo CTC decoding with the model's other settings, computing word timestamps and confidence with
    NeMo's ``max_prob`` measure (``duet.asr.words``' module doc says why that one)."""
    # merged, not assigned: the config may be NeMo's structured CTCDecodingConfig, whose confidence_cfg is typed
    cfg = copy.deepcopy(model.cfg.decoding)
    OmegaConf.set_struct(cfg, False)  # a .nemo's plain config may lack the keys
    cfg = OmegaConf.merge(cfg, {"strategy": "greedy_batch", "compute_timestamps": True, "confidence_cfg": {
        "preserve_frame_confidence": True, "preserve_word_confidence": True, "aggregation": "min",
        "method_cfg": {"name": "max_prob", "alpha": 1.0}}})
    return nemo_ctc_decoding(model, cfg)


def blank_past_end(log_probs: torch.Tensor, lengths: torch.Tensor, blank_id: int) -> torch.Tensor:
    """``log_probs`` [B, T, V] with every frame past its utterance's length certain of blank (log-prob 0 for blank,
    NEVER for the rest), so that a batch decodes each utterance as it would alone. NeMo's batched beam search
    (``beam_batch``) stops extending an utterance's labels at its length but goes on adding the padded frames' scores
    (and the beam bonus and LM scores on them) and re-ranking and pruning its beams by them, so its transcripts
    changed with the batch they were decoded in (RESULTS-history.md has the figures). With blank certain there,
    every beam extends by blank at no cost and keeps its rank. Greedy reads only up to the length anyway. Returns
    ``log_probs`` itself when no frame is padding."""
    frames = log_probs.shape[1]
    past_end = torch.arange(frames, device=log_probs.device)[None, :] >= lengths.to(log_probs.device)[:, None]
    if not bool(past_end.any()):
        return log_probs
    certain_blank = torch.full((log_probs.shape[2],), NEVER, dtype=log_probs.dtype, device=log_probs.device)
    certain_blank[blank_id] = 0.0
    return torch.where(past_end[:, :, None], certain_blank, log_probs)


def hypothesis_text(hyp) -> str:
    """The text of what NeMo's decoding or ``transcribe()`` returns per utterance: a ``Hypothesis`` or, from some
    versions and strategies, a plain string."""
    return hyp.text if hasattr(hyp, "text") else str(hyp)


def merge_blank_runs(log_probs: torch.Tensor, lengths: torch.Tensor, blank_id: int, probability: float
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """``log_probs`` [B, T, V] with each run of frames on which blank is at least ``probability`` likely read as its
    first frame alone, and the new lengths: what a beam search needs to read. Between two tokens, the one frame left
    keeps them apart (a repeated token stays two); on those frames every hypothesis extends by blank at nearly no
    cost, so the beam's candidates and their order hardly change, and the search costs the frames that remain.
    ``probability`` 0: ``log_probs`` and ``lengths`` as they are."""
    if probability <= 0:
        return log_probs, lengths
    kept = []
    for row in range(log_probs.shape[0]):
        frames = log_probs[row, : int(lengths[row])]
        sure = frames[:, blank_id] >= math.log(probability)
        after_sure = torch.cat([sure.new_zeros(1), sure[:-1]])
        kept.append(frames[~(sure & after_sure)])
    new_lengths = torch.tensor([len(k) for k in kept], dtype=lengths.dtype, device=lengths.device)
    merged = log_probs.new_zeros(len(kept), max([1, *map(len, kept)]), log_probs.shape[2])
    for row, frames in enumerate(kept):
        merged[row, : len(frames)] = frames
    return merged, new_lengths
