"""Cache-aware streaming transcription with a NeMo FastConformer-CTC trained for it.

The model must be built with a streaming encoder config (``configs/fastconformer_small_streaming.yaml``:
causal downsampling, causal convolutions, ``chunked_limited`` attention). NeMo does the work:
``CacheAwareStreamingAudioBuffer`` cuts the log-mel features into chunks (each with the few frames of
history the causal subsampling needs) and ``model.conformer_stream_step`` runs the encoder on one chunk,
carrying the attention and convolution caches to the next, and greedy-decodes everything so far.

Features of a file are computed in one go before streaming (the ``per_feature`` normalisation of the
model needs utterance statistics; ``online_normalization=True`` normalises each chunk on its own instead,
as a live microphone would have to, at some cost in accuracy for models not trained that way). The
timings reported per chunk are those of the encoder + decoder step, which is what bounds real-time use.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
import torch
from omegaconf import OmegaConf, open_dict
from tqdm import tqdm

from duet.asr.evaluate import evaluate_manifest
from duet.asr.inference import load_audio
from duet.asr.scoring import Scored
from duet.errors import AsrInputError
from duet.io import atomic_path


@dataclass
class Partial:
    """The transcript after one streamed chunk."""

    text: str  # everything recognised so far (greedy CTC), not only this chunk's words
    chunk_index: int
    audio_seconds: float  # audio consumed so far, look-ahead included: a live stream would be this far in
    compute_seconds: float  # wall time of this chunk's encoder + decoding step
    is_final: bool
    frame_labels: list[int]  # greedy (argmax) label of every encoder frame so far, blanks included


@dataclass(frozen=True)
class StreamingLatency:
    """Algorithmic latency of a cache-aware model (compute time comes on top)."""

    frame_ms: float  # one encoder frame = subsampling factor x feature stride
    left_context_frames: int
    lookahead_frames: int
    lookahead_ms: float  # right context x subsampling x stride
    chunk_ms: float  # audio consumed per step: (look-ahead + 1) encoder frames

    def describe(self) -> str:
        return (f"chunk {self.chunk_ms:.0f} ms, look-ahead {self.lookahead_ms:.0f} ms, "
                f"left context {self.left_context_frames * self.frame_ms / 1000:.1f} s")


class StreamingModelError(AsrInputError):
    """The model cannot stream (offline encoder config, non-greedy decoding)."""


def check_streaming_model(model) -> None:
    """Raise ``StreamingModelError`` unless ``model`` has a cache-aware (chunked-limited, causal) encoder."""
    # NeMo takes ~21 s to import: only the calls that use it pay for it
    from nemo.collections.asr.parts.mixins.streaming import StreamingEncoder

    encoder = getattr(model, "encoder", None)
    if not isinstance(encoder, StreamingEncoder):
        raise StreamingModelError(f"{type(model).__name__}: its encoder does not support cache-aware streaming; "
                                  "train a model with configs/fastconformer_small_streaming.yaml")
    cfg = model.cfg.encoder
    problems = []
    if cfg.get("att_context_style") != "chunked_limited":
        problems.append(f"att_context_style={cfg.get('att_context_style')} (need chunked_limited)")
    if cfg.get("conv_context_size") != "causal":
        problems.append(f"conv_context_size={cfg.get('conv_context_size')} (need causal)")
    if not cfg.get("causal_downsampling", False):
        problems.append("causal_downsampling=false")
    if problems:
        raise StreamingModelError(
            "model was not trained for streaming: " + ", ".join(problems)
            + "; train it with configs/fastconformer_small_streaming.yaml"
        )
    if model.cfg.decoding.strategy not in ("greedy", "greedy_batch"):
        raise StreamingModelError(
            f"streaming decodes greedily; the model is set to {model.cfg.decoding.strategy} "
            "(duet.asr.decoding.set_decoding(model, strategy='greedy'))"
        )


STREAMING_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "fastconformer_small_streaming.yaml"


def streaming_encoder_settings(att_context_size: list[int] | None = None) -> dict:
    """The encoder keys that make a FastConformer cache-aware, as set in ``configs/fastconformer_small_streaming.yaml``."""
    settings = OmegaConf.to_container(OmegaConf.load(STREAMING_CONFIG).model.encoder)
    if att_context_size is not None:
        settings["att_context_size"] = list(att_context_size)
    return settings


def convert_to_streaming(nemo_path: str | Path, out_path: str | Path, att_context_size: list[int] | None = None):
    """An offline FastConformer-CTC ``.nemo`` rebuilt with the streaming encoder settings, saved to ``out_path``.

    Weights carry over where their shapes do: the causal convolutions keep their kernels and the conv
    module's LayerNorm takes the BatchNorm's scale and bias (its running statistics are dropped). Causal
    subsampling changes the width of the subsampling's output projection, which starts from NeMo's
    initialisation, like a decoder after ``change_vocabulary``. The network also sees less context than
    it was trained with: fine-tune the result with the recipe (``init_from_nemo_model=<out_path>``)
    before using it. Returns ``(model, names of re-initialised encoder tensors)``.
    """
    # NeMo takes ~21 s to import: only the calls that use it pay for it
    from nemo.collections.asr.models import ASRModel

    nemo_path = Path(nemo_path)
    if not nemo_path.is_file():
        raise AsrInputError(f"model file not found: {nemo_path}")
    model = ASRModel.restore_from(str(nemo_path), map_location=torch.device("cpu"))
    encoder_cfg = copy.deepcopy(model.cfg.encoder)
    with open_dict(encoder_cfg):
        encoder_cfg.update(streaming_encoder_settings(att_context_size))
    encoder = ASRModel.from_config_dict(encoder_cfg)
    old, new = model.encoder.state_dict(), encoder.state_dict()
    carried = {k: v for k, v in old.items() if k in new and new[k].shape == v.shape}
    encoder.load_state_dict(carried, strict=False)
    model.encoder = encoder
    with open_dict(model.cfg):
        model.cfg.encoder = encoder_cfg
    out_path = Path(out_path)
    with atomic_path(out_path) as tmp:
        tmp_nemo = tmp.with_suffix(".nemo")  # NeMo picks the archive format from the suffix
        model.save_to(str(tmp_nemo))
        tmp_nemo.replace(tmp)
    return model.eval(), sorted(f"encoder.{k}" for k in new if k not in carried)


def streaming_latency(model, att_context_size: list[int] | None = None) -> StreamingLatency:
    """Chunk length and look-ahead implied by the encoder's (or the given) attention context."""
    left, right = att_context_size or list(model.encoder.att_context_size)
    stride_ms = 1000 * float(model.cfg.preprocessor.window_stride)
    frame_ms = model.encoder.subsampling_factor * stride_ms
    return StreamingLatency(
        frame_ms=frame_ms, left_context_frames=int(left), lookahead_frames=int(right),
        lookahead_ms=right * frame_ms, chunk_ms=(right + 1) * frame_ms,
    )


def _pad_last_chunk(buffer, first_chunk: int) -> None:
    """Zero-pad the feature buffer (not its recorded length) so that NeMo's buffer does not silently drop
    a last chunk shorter than one subsampling window: its frames are real audio and offline decoding uses them."""
    cfg = buffer.streaming_cfg
    shifts = cfg.shift_size if isinstance(cfg.shift_size, list) else [cfg.shift_size] * 2
    sampling = buffer.sampling_frames
    min_frames = (sampling[1] if isinstance(sampling, list) else sampling) if sampling is not None else 1
    size = buffer.buffer.size(-1)
    if size <= first_chunk:
        return
    last_start = shifts[0] + ((size - shifts[0] - 1) // shifts[1]) * shifts[1]
    shortfall = min_frames - (size - last_start)
    if shortfall > 0:
        buffer.buffer = torch.nn.functional.pad(buffer.buffer, (0, shortfall))


def _text(hyp) -> str:
    return hyp.text if hasattr(hyp, "text") else str(hyp)


def stream_transcribe(
    model,
    audio: str | Path | np.ndarray,
    att_context_size: list[int] | None = None,
    online_normalization: bool = False,
) -> Iterator[Partial]:
    """Feed ``audio`` (a file, or float32 samples at the model's rate) chunk by chunk; yield a ``Partial``
    after each chunk, the last one with ``is_final=True``.

    ``att_context_size`` picks one of the look-aheads a multi-look-ahead model was trained with.
    """
    # NeMo takes ~21 s to import: only the calls that use it pay for it
    from nemo.collections.asr.parts.utils.streaming_utils import CacheAwareStreamingAudioBuffer

    check_streaming_model(model)
    if att_context_size is not None:
        model.encoder.set_default_att_context_size(list(att_context_size))
    model.encoder.setup_streaming_params()
    if isinstance(audio, (str, Path)):
        samples = load_audio(audio, int(model.cfg.sample_rate))
    else:
        samples = np.asarray(audio, dtype=np.float32)
    if samples.size == 0:
        raise AsrInputError(f"no audio samples in {audio if isinstance(audio, (str, Path)) else 'the input array'}")

    was_training = model.training
    model.eval()
    try:
        buffer = CacheAwareStreamingAudioBuffer(
            model=model, online_normalization=online_normalization, pad_and_drop_preencoded=False
        )
        features, feature_length = buffer.preprocess_audio(samples)
        # only the valid frames: the feature tensor has one more (padding) frame than its length says, which
        # NeMo's append_audio would stream as audio and turn into an extra encoder frame at the end
        buffer.append_processed_signal(features[:, :, : int(feature_length[0])])
        total_frames = int(buffer.streams_length[0])
        stride_s = float(model.cfg.preprocessor.window_stride)
        cfg = model.encoder.streaming_cfg
        first_chunk, next_chunks = (cfg.chunk_size if isinstance(cfg.chunk_size, list) else [cfg.chunk_size] * 2)
        _pad_last_chunk(buffer, first_chunk)
        cache_channel, cache_time, cache_channel_len = model.encoder.get_initial_cache_state(batch_size=1)
        previous_predictions = None
        chunks = iter(buffer)
        # One chunk is read ahead, so the step that gets the last chunk knows it is the last (NeMo's
        # buffer may also stop before the end when the remainder is too short to give an encoder frame).
        start_frame = buffer.buffer_idx
        pending = next(chunks, None)
        step = 0
        while pending is not None:
            chunk, chunk_lengths = pending
            end_frame = min(start_frame + (first_chunk if step == 0 else next_chunks), total_frames)
            start_frame = buffer.buffer_idx
            pending = next(chunks, None)
            is_final = pending is None
            tic = time.perf_counter()
            with torch.inference_mode():
                (previous_predictions, texts, cache_channel, cache_time, cache_channel_len, _) = model.conformer_stream_step(
                    processed_signal=chunk,
                    processed_signal_length=chunk_lengths,
                    cache_last_channel=cache_channel,
                    cache_last_time=cache_time,
                    cache_last_channel_len=cache_channel_len,
                    keep_all_outputs=is_final,  # the last chunk also emits the frames held back as look-ahead
                    previous_pred_out=previous_predictions,
                    # the first chunk has no cached pre-encode frames to drop
                    drop_extra_pre_encoded=0 if step == 0 else cfg.drop_extra_pre_encoded,
                    return_transcription=True,
                )
            compute = time.perf_counter() - tic
            yield Partial(
                text=_text(texts[0]), chunk_index=step,
                audio_seconds=round((total_frames if is_final else end_frame) * stride_s, 3),
                compute_seconds=compute, is_final=is_final, frame_labels=previous_predictions[0].tolist(),
            )
            step += 1
    finally:
        model.train(was_training)


def transcribe_streaming(model, audio, **kwargs) -> tuple[str, list[Partial]]:
    """Stream ``audio`` to the end; returns the final transcript and every partial (for timing reports)."""
    partials = list(stream_transcribe(model, audio, **kwargs))
    return (partials[-1].text if partials else ""), partials


def streaming_report(model, partials: list[Partial]) -> dict:
    """Algorithmic latency of ``model`` (look-ahead, chunk length) and the compute time per chunk (encoder +
    decoding step, the part that bounds real-time use) over ``partials``, one per chunk."""
    latency = streaming_latency(model)
    ms = np.array([1000 * p.compute_seconds for p in partials]) if partials else np.zeros(1)
    return {"lookahead_ms": latency.lookahead_ms, "chunk_ms": latency.chunk_ms,
            "left_context_s": round(latency.left_context_frames * latency.frame_ms / 1000, 2),
            "chunks": len(partials), "chunk_compute_ms_median": round(float(np.median(ms)), 2),
            "chunk_compute_ms_max": round(float(ms.max()), 2)}


def describe_report(report: dict) -> str:
    """One line of a :func:`streaming_report`."""
    return (f"look-ahead {report['lookahead_ms']:.0f} ms, chunk {report['chunk_ms']:.0f} ms, compute per chunk "
            f"median {report['chunk_compute_ms_median']:.1f} ms / max {report['chunk_compute_ms_max']:.1f} ms")


def transcribe_files_streaming(model, paths, progress: bool = False) -> tuple[list[str], list[Partial]]:
    """Stream each file in turn (batch 1, as a live stream would run); returns the final transcripts in
    input order and the partials of all files."""
    texts, partials = [], []
    for path in tqdm(paths, desc="stream", unit="file", disable=not progress):
        text, parts = transcribe_streaming(model, path)
        texts.append(text)
        partials += parts
    return texts, partials


def evaluate_manifest_streaming(model, manifest, progress: bool = True) -> Scored:
    """``duet.asr.evaluate.evaluate_manifest`` through the streaming path; the summary gains a ``streaming``
    entry (:func:`streaming_report` over every chunk of every file)."""
    check_streaming_model(model)
    partials: list[Partial] = []

    def transcribe(paths):
        texts, parts = transcribe_files_streaming(model, paths, progress=progress)
        partials.extend(parts)
        return texts

    scored = evaluate_manifest(model, manifest, batch_size=1, progress=progress, transcribe=transcribe)
    scored.summary["streaming"] = streaming_report(model, partials)
    return scored
