"""Progressive downsampling checks: will the CTC output still be long enough for every transcript?

Progressive downsampling reduces the encoder's time resolution in stages: NeMo's subsampling front
end (``subsampling_factor``, e.g. 8 = 80 ms frames) and then, inside the layer stack, NeMo's
``reduction`` module (``reduction: pooling|striding``, ``reduction_position: <layer index>``,
``reduction_factor: 2`` -> 160 ms frames). Fewer frames are cheaper, but CTC needs at least one
frame per output token plus one blank between two identical consecutive tokens; with fewer frames
the utterance cannot be aligned at all (NeMo's CTC loss then silently zeroes it: ``zero_infinity``).

:func:`check_ctc_lengths` computes, for every utterance of a manifest, the encoder output length the
model config would produce and the frames its token sequence needs, and raises
:class:`CtcLengthError` naming the first utterance that does not fit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import sentencepiece as spm
import torch
from omegaconf import DictConfig

from duet.errors import DuetError
from duet.data.manifest import read_manifest

__all__ = ["CtcLengthError", "CtcLengthReport", "check_ctc_lengths", "ctc_required_frames", "encoder_output_lengths"]


class CtcLengthError(DuetError, ValueError):
    """A config whose encoder output is shorter than some utterance's token sequence (CTC impossible)."""


def _subsampled_lengths(module, lengths: torch.Tensor) -> torch.Tensor:
    """Lengths after one of NeMo's time-subsampling modules, with the formula its ``forward`` uses."""
    # NeMo takes ~21 s to import: only the calls that use it pay for it
    from nemo.collections.asr.parts.submodules.subsampling import (
        ConvSubsampling,
        SubsamplingReductionModule,
        calc_length,
    )

    if isinstance(module, torch.nn.Linear):  # no subsampling front end
        return lengths
    if isinstance(module, ConvSubsampling):
        return calc_length(
            lengths,
            all_paddings=module._left_padding + module._right_padding,
            kernel_size=module._kernel_size,
            stride=module._stride,
            ceil_mode=module._ceil_mode,
            repeat_num=module._sampling_num,
        ).to(torch.int64)
    if isinstance(module, SubsamplingReductionModule):
        if module.reduction == "striding":
            return _subsampled_lengths(module.reduction_enc, lengths)
        return calc_length(
            lengths,
            all_paddings=module.padding,
            kernel_size=module.kernel_size,
            stride=module.stride,
            ceil_mode=False,
            repeat_num=module._sampling_num,
        ).to(torch.int64)
    raise ValueError(f"output-length arithmetic does not know the subsampling module {type(module).__name__}")


def encoder_output_lengths(preprocessor, encoder, num_samples: torch.Tensor) -> torch.Tensor:
    """Encoder output frames for audio of ``num_samples`` samples: mel frames, front end, reduction."""
    lengths = preprocessor.featurizer.get_seq_len(num_samples.to(torch.int64))
    lengths = _subsampled_lengths(encoder.pre_encode, lengths)
    if encoder.reduction_subsampling is not None:
        lengths = _subsampled_lengths(encoder.reduction_subsampling, lengths)
    return lengths


def ctc_required_frames(token_ids: list[int]) -> int:
    """Fewest frames a CTC alignment of ``token_ids`` needs: one per token, one blank per repeat."""
    repeats = sum(1 for a, b in zip(token_ids, token_ids[1:]) if a == b)
    return len(token_ids) + repeats


@dataclass
class CtcLengthReport:
    utterances: int
    tightest_id: str  # the utterance with the smallest margin (frames - required)
    tightest_frames: int
    tightest_required: int
    frame_ms: float  # encoder output frame duration

    def __str__(self) -> str:
        return (
            f"{self.utterances} utterances fit CTC at {self.frame_ms:g} ms per encoder frame; tightest "
            f"{self.tightest_id}: {self.tightest_frames} frames for {self.tightest_required} needed"
        )


def _build(model_cfg: DictConfig):
    from nemo.collections.asr.models import EncDecCTCModelBPE

    import duet.asr.resmha  # noqa: F401  (lets NeMo instantiate a ResMHA encoder section)

    preprocessor = EncDecCTCModelBPE.from_config_dict(model_cfg.preprocessor)
    encoder = EncDecCTCModelBPE.from_config_dict(model_cfg.encoder)
    return preprocessor, encoder


def check_ctc_lengths(model_cfg: DictConfig, manifest: str | Path, tokenizer_dir: str | Path) -> CtcLengthReport:
    """Raise :class:`CtcLengthError` if any utterance of ``manifest`` is too short for CTC under ``model_cfg``.

    ``model_cfg`` is a model config with ``preprocessor`` and ``encoder`` sections (a recipe's
    ``cfg.model`` or a restored model's ``model.cfg``); the modules are built from it so the lengths
    come from NeMo's own length formulas. ``tokenizer_dir`` holds the SentencePiece ``tokenizer.model``
    the model is trained with. Returns the tightest utterance when everything fits.
    """
    model_file = Path(tokenizer_dir) / "tokenizer.model"
    if not model_file.is_file():
        raise CtcLengthError(f"tokenizer not found: {model_file}")
    tokenizer = spm.SentencePieceProcessor(model_file=str(model_file))
    entries = read_manifest(manifest)
    if not entries:
        raise CtcLengthError(f"manifest is empty: {manifest}")
    preprocessor, encoder = _build(model_cfg)
    sample_rate = preprocessor._sample_rate
    num_samples = torch.tensor([math.floor(float(e["duration"]) * sample_rate) for e in entries])
    frames = encoder_output_lengths(preprocessor, encoder, num_samples).tolist()
    required = [ctc_required_frames(tokenizer.encode(e["text"])) for e in entries]
    margins = [f - r for f, r in zip(frames, required)]
    tightest = min(range(len(entries)), key=margins.__getitem__)
    utt_id = entries[tightest].get("id") or entries[tightest]["audio_filepath"]
    reduction = model_cfg.encoder.get("reduction_factor", 1) if model_cfg.encoder.get("reduction") else 1
    frame_ms = 1000.0 * preprocessor.featurizer.hop_length / sample_rate * encoder.subsampling_factor * reduction
    if margins[tightest] < 0:
        too_short = sum(m < 0 for m in margins)
        raise CtcLengthError(
            f"{utt_id} ({entries[tightest]['duration']} s, text {entries[tightest]['text']!r}): the encoder "
            f"outputs {frames[tightest]} frames but CTC needs {required[tightest]} for its tokens; "
            f"{too_short} of {len(entries)} utterances in {manifest} are too short for this config "
            "(lower the reduction/subsampling factor or use a larger vocabulary)"
        )
    return CtcLengthReport(len(entries), str(utt_id), frames[tightest], required[tightest], frame_ms)
