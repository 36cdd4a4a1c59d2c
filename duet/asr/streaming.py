"""Cache-aware streaming transcription with a NeMo FastConformer-CTC trained for it.

The model must be built with a streaming encoder config (``configs/fastconformer_small_streaming.yaml``:
causal downsampling, causal convolutions, ``chunked_limited`` attention). ``StreamingSession`` takes samples
as they arrive (a microphone, a pipe, a WebSocket) and returns a ``Partial`` for every chunk that completes;
``stream_transcribe`` feeds it a file or array in 100 ms pieces, so files and live sources share one path.

Everything is incremental, so memory stays bounded however long the stream:
- features: ``IncrementalFeatures`` runs the model's own NeMo preprocessor on each new stretch of samples plus
  the few hundred samples its first STFT windows share with the previous stretch, which gives the whole
  signal's log-mel frames exactly (the tests compare them frame for frame);
- normalisation follows the model's ``preprocessor.normalize``: ``NA`` (or fixed statistics) needs none, and
  streaming then equals offline decoding frame for frame; ``per_feature`` (utterance mean/std per mel bin) is
  replaced by ``RunningFeatureNormalization``, the statistics of every frame so far, so early chunks are
  normalised differently from offline decoding (the last chunk gets the whole utterance's statistics);
- NeMo does the rest: ``CacheAwareStreamingAudioBuffer`` cuts the normalised frames into chunks (each with
  the few frames of history the causal subsampling needs) and ``model.conformer_stream_step`` runs the
  encoder on one chunk, carrying the attention and convolution caches to the next, and greedy-decodes
  everything so far.

Latency: a chunk is decoded once its last frame's STFT window has arrived, ``chunk_ms`` of audio plus
``n_fft - n_fft // 2 - hop`` samples (6 ms); the compute per chunk (features, normalisation, encoder step and
decoding, in ``Partial.compute_seconds``) comes on top.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Collection, Iterable, Iterator

import numpy as np
import torch
from omegaconf import OmegaConf, open_dict
from tqdm import tqdm

from duet.asr.evaluation import evaluate_manifest
from duet.asr.decoding.nemo_decoding import hypothesis_text
from duet.asr.inference import load_audio
from duet.asr.scoring import Scored
from duet.errors import AsrInputError
from duet.foundation.files import atomic_path


@dataclass
class Partial:
    """The transcript after one streamed chunk."""

    text: str  # everything recognised so far (greedy CTC), not only this chunk's words
    chunk_index: int
    audio_seconds: float  # audio consumed so far, look-ahead included: a live stream would be this far in
    compute_seconds: float  # wall time of this chunk's features, normalisation, encoder and decoding step
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
            f"streaming decodes greedily; the model's saved decoding config says {model.cfg.decoding.strategy} "
            "(save it with decoding.strategy greedy_batch)"
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


def _pad_last_chunk(buffer, shifts: tuple[int, int], first_chunk: int) -> None:
    """Zero-pad the feature buffer (not its recorded length) so that NeMo's buffer does not silently drop
    a last chunk shorter than one subsampling window: its frames are real audio and offline decoding uses them.
    ``shifts``/``first_chunk``: the streaming config's shift sizes and first chunk size, in frames."""
    size, start = buffer.buffer.size(-1), buffer.buffer_idx
    if start == 0:  # NeMo's first chunk: first_chunk frames, then shifts of the later size
        if size <= first_chunk:
            return
        start = shifts[0]
    last_start = start + ((size - start - 1) // shifts[1]) * shifts[1]
    sampling = buffer.sampling_frames
    min_frames = (sampling[1] if isinstance(sampling, list) else sampling) if sampling is not None else 1
    shortfall = min_frames - (size - last_start)
    if shortfall > 0:
        buffer.buffer = torch.nn.functional.pad(buffer.buffer, (0, shortfall))


def _first_and_next(value) -> tuple[int, int]:
    """NeMo's streaming sizes are ``[first chunk, later chunks]`` or one number for both."""
    return (int(value[0]), int(value[1])) if isinstance(value, (list, tuple)) else (int(value), int(value))


class IncrementalFeatures:
    """Log-mel features of a signal that arrives piece by piece, computed as soon as each frame's window has
    arrived, frame for frame those of the model's NeMo preprocessor on the whole signal (before normalisation).

    NeMo's ``FilterbankFeatures`` centres frame ``t``'s STFT window on sample ``t * hop`` and pre-emphasises
    each sample with the one before it, so frame ``t`` depends on samples ``[t*hop - left, t*hop - left + n_fft)``
    and one more on the left. The preprocessor is run on just those samples (from a multiple of ``hop``, so
    that its frames line up with the whole signal's), and the frames whose window lies inside them are kept;
    the samples no later frame needs are dropped, so memory stays bounded. The preprocessor is the model's
    own, made deterministic by NeMo (no dither, no padding to a multiple) and without utterance normalisation
    when the model uses ``per_feature`` (see ``RunningFeatureNormalization``). Frames at the very end, whose
    window runs past the last sample, are computed by ``compute(..., final=True)`` with the preprocessor's
    own zero padding, as on the whole signal.
    """

    def __init__(self, model, keep_normalization: bool):
        # NeMo takes ~21 s to import: only the calls that use it pay for it
        from nemo.collections.asr.inference.utils.pipeline_utils import make_preprocessor_deterministic

        cfg = make_preprocessor_deterministic(copy.deepcopy(model.cfg), disable_normalization=not keep_normalization)
        self.preprocessor = model.from_config_dict(cfg.preprocessor).to(model.device).eval()
        self.preprocessor.load_state_dict(model.preprocessor.state_dict())  # the same window and mel filterbank
        featurizer = self.preprocessor.featurizer
        if int(getattr(featurizer, "frame_splicing", 1)) != 1:
            raise StreamingModelError("streaming needs frame_splicing=1 in the model's preprocessor")
        self.hop = int(featurizer.hop_length)
        self.n_fft = int(featurizer.n_fft)
        # samples of padding before sample 0 in the STFT: n_fft // 2 with centred frames, else exact_pad's
        self.left = int(featurizer.stft_pad_amount) if featurizer.stft_pad_amount is not None else self.n_fft // 2
        self.get_seq_len = featurizer.get_seq_len
        self.device = model.device
        self.received = 0  # samples fed so far
        self.frames_done = 0  # frames computed so far
        self._offset = 0  # stream index of the first sample still held
        self._pieces: list[np.ndarray] = []

    def add(self, samples: np.ndarray) -> None:
        if samples.size:
            self._pieces.append(samples)
            self.received += samples.size

    def frames_ready(self) -> int:
        """Frames whose whole window has arrived (more come at the end, with zero padding)."""
        reach = self.n_fft - self.left  # samples from frame t's centre t*hop to its window's end
        return 0 if self.received < reach else (self.received - reach) // self.hop + 1

    def total_frames(self) -> int:
        """Valid frames of everything fed, as the preprocessor counts them for the whole signal."""
        return int(self.get_seq_len(torch.tensor([self.received]))[0])

    def _segment_start(self, frame: int) -> int:
        # a multiple of hop at least one sample before frame's window (pre-emphasis reads the sample before)
        return max(0, (frame * self.hop - self.left - 1) // self.hop * self.hop)

    def compute(self, end_frame: int, final: bool = False) -> torch.Tensor:
        """Frames ``[frames_done, end_frame)`` as a ``(1, features, frames)`` tensor; ``final``: the input has
        ended, frames may reach past the last sample."""
        first = self.frames_done
        if end_frame <= first:
            return torch.zeros(1, self.preprocessor.featurizer.nfilt, 0, device=self.device)
        if not final and end_frame > self.frames_ready():
            raise ValueError(f"frame {end_frame - 1} needs samples that have not arrived")
        held = np.concatenate(self._pieces) if len(self._pieces) != 1 else self._pieces[0]
        start = self._segment_start(first)
        stop = self.received if final else (end_frame - 1) * self.hop - self.left + self.n_fft
        segment = torch.from_numpy(np.ascontiguousarray(held[start - self._offset: stop - self._offset]))
        with torch.inference_mode():
            features, _ = self.preprocessor(input_signal=segment[None].to(self.device),
                                            length=torch.tensor([segment.numel()], device=self.device))
        skip = start // self.hop
        frames = features[:, :, first - skip: end_frame - skip]
        self.frames_done = end_frame
        keep_from = self._segment_start(end_frame)
        self._pieces = [held[keep_from - self._offset:]]
        self._offset = keep_from
        return frames


class RunningFeatureNormalization:
    """NeMo's ``per_feature`` normalisation (zero mean, unit variance per mel bin) with the statistics of every
    frame so far instead of the whole utterance's, which a live stream does not have yet.

    Each block of frames is normalised once, when it is computed, with the mean and (unbiased) standard
    deviation of all frames up to its end, ``+ 1e-5`` as NeMo's ``normalize_batch`` adds. So the last block of
    an utterance is normalised exactly as offline decoding normalises the whole utterance, and earlier blocks
    with the statistics of a prefix. Sums are kept in float64 (a few bytes per mel bin, whatever the length).
    """

    def __init__(self, features: int):
        self.count = 0
        self.sum = torch.zeros(features, dtype=torch.float64)
        self.sum_squares = torch.zeros(features, dtype=torch.float64)

    def __call__(self, frames: torch.Tensor) -> torch.Tensor:
        """``frames``: ``(1, features, n)``, the next frames of the stream; returns them normalised."""
        # NeMo takes ~21 s to import: only the calls that use it pay for it
        from nemo.collections.asr.parts.preprocessing.features import CONSTANT

        if frames.size(-1) == 0:
            return frames
        block = frames[0].to(torch.float64).cpu()
        self.count += block.size(-1)
        self.sum += block.sum(-1)
        self.sum_squares += (block * block).sum(-1)
        mean = self.sum / self.count
        if self.count > 1:
            variance = ((self.sum_squares - self.sum * mean) / (self.count - 1)).clamp(min=0.0)
            std = variance.sqrt()
        else:  # NeMo's normalize_batch: the std of one frame (nan) counts as 0
            std = torch.zeros_like(mean)
        std = std + CONSTANT
        normalized = (frames - mean.to(frames)[None, :, None]) / std.to(frames)[None, :, None]
        return normalized


class StreamingSession:
    """One live stream through a cache-aware model: samples in as they arrive, partial transcripts out.

    Contract (no I/O, no threads of its own; one session per stream, used from one thread at a time;
    several sessions may share a model when they use the same ``att_context_size``):

    - ``feed(samples)``: 1-D float samples in [-1, 1], mono, at the model's rate (``sample_rate``, 16 kHz),
      any number (one sample to a whole file). Returns the ``Partial`` of every chunk that became complete
      (often none; several when a long piece arrives), in order, none of them final.
    - ``finish()``: the input has ended. Decodes what is left (frames whose window runs past the end, a last
      chunk shorter than the others) and returns the remaining partials, the last one with
      ``is_final=True`` (always exactly one final partial, even for no audio). Nothing can be fed after it.
    - Latency: a chunk is decoded as soon as its last feature frame's window has arrived, i.e. ``chunk_ms``
      of audio (the first chunk is one subsampling window shorter) plus ``n_fft - left - hop`` samples
      (6 ms at 16 kHz, 512-point FFT); ``latency`` has the figures.
    - Memory is bounded whatever the stream's length: the samples of the current STFT windows, the feature
      frames of the chunk being decoded plus NeMo's pre-encode cache, and the encoder's fixed-size attention
      and convolution caches. Only the transcript and the greedy frame labels (one int per 80 ms) grow.
    - Output is independent of how the samples are cut into ``feed`` calls: features are computed chunk by
      chunk at the same sample positions whatever arrives when.

    Normalisation follows the model's preprocessor: ``per_feature`` (utterance statistics) becomes
    ``RunningFeatureNormalization`` (statistics so far), so partials differ from offline decoding of the
    whole file; a model trained with ``normalize: NA`` (NeMo's cache-aware configs and
    ``configs/fastconformer_small_streaming.yaml``) or fixed statistics streams exactly as it decodes offline.
    ``all_features`` is refused.

    The session puts the model in eval mode and sets its streaming parameters (``att_context_size`` picks
    one look-ahead of a multi-look-ahead model; it is model-wide).
    """

    def __init__(self, model, att_context_size: list[int] | None = None):
        # NeMo takes ~21 s to import: only the calls that use it pay for it
        from nemo.collections.asr.parts.utils.streaming_utils import CacheAwareStreamingAudioBuffer

        check_streaming_model(model)
        normalize = model.cfg.preprocessor.get("normalize")
        if normalize == "all_features":
            raise StreamingModelError("normalize=all_features needs the whole utterance; streaming supports "
                                      "per_feature (running statistics), fixed statistics or NA")
        if att_context_size is not None:
            model.encoder.set_default_att_context_size(list(att_context_size))
        model.encoder.setup_streaming_params()
        model.eval()
        self.model = model
        self.sample_rate = int(model.cfg.sample_rate)
        self.latency = streaming_latency(model)
        self.running_normalization = normalize == "per_feature"
        self.features = IncrementalFeatures(model, keep_normalization=not self.running_normalization)
        self._normalize = (RunningFeatureNormalization(self.features.preprocessor.featurizer.nfilt)
                           if self.running_normalization else (lambda frames: frames))
        # NeMo's buffer cuts the chunks (with the pre-encode cache frames the causal subsampling needs);
        # normalisation is done here, so it must not normalise again
        self._buffer = CacheAwareStreamingAudioBuffer(model=model, online_normalization=False,
                                                      pad_and_drop_preencoded=False)
        cfg = model.encoder.streaming_cfg
        self._chunk_sizes = _first_and_next(cfg.chunk_size)
        self._shift_sizes = _first_and_next(cfg.shift_size)
        self._pre_encode_cache = _first_and_next(cfg.pre_encode_cache_size)[1]
        self._drop_extra_pre_encoded = cfg.drop_extra_pre_encoded
        self._stride_s = float(model.cfg.preprocessor.window_stride)
        self._caches = model.encoder.get_initial_cache_state(batch_size=1)
        self._predictions = None
        self._chunk_start = 0  # stream frame where the next chunk starts
        self._step = 0
        self._last: Partial | None = None
        self.finished = False

    @property
    def audio_seconds(self) -> float:
        """Audio fed so far, in seconds."""
        return self.features.received / self.sample_rate

    def _chunk_end(self) -> int:
        return self._chunk_start + self._chunk_sizes[0 if self._step == 0 else 1]

    def _append_features(self, end_frame: int, final: bool) -> None:
        frames = self._normalize(self.features.compute(end_frame, final=final))
        if frames.size(-1):
            self._buffer.append_processed_signal(frames, stream_id=-1 if self._buffer.buffer is None else 0)

    def _decode(self, chunk, chunk_lengths, is_final: bool, audio_frames: int, tic: float) -> Partial:
        with torch.inference_mode():
            (self._predictions, texts, *caches, _) = self.model.conformer_stream_step(
                processed_signal=chunk,
                processed_signal_length=chunk_lengths,
                cache_last_channel=self._caches[0],
                cache_last_time=self._caches[1],
                cache_last_channel_len=self._caches[2],
                keep_all_outputs=is_final,  # the last chunk also emits the frames held back as look-ahead
                previous_pred_out=self._predictions,
                # the first chunk has no cached pre-encode frames to drop
                drop_extra_pre_encoded=0 if self._step == 0 else self._drop_extra_pre_encoded,
                return_transcription=True,
            )
        self._caches = caches
        partial = Partial(text=hypothesis_text(texts[0]), chunk_index=self._step,
                          audio_seconds=round(audio_frames * self._stride_s, 3),
                          compute_seconds=time.perf_counter() - tic, is_final=is_final,
                          frame_labels=self._predictions[0].tolist())
        self._chunk_start += self._shift_sizes[0 if self._step == 0 else 1]
        self._step += 1
        self._forget_consumed_frames()
        self._last = partial
        return partial

    def _forget_consumed_frames(self) -> None:
        # NeMo's buffer keeps every frame appended; the next chunk reads from buffer_idx back to the pre-encode
        # cache only, so the rest goes (buffer_idx stays > 0: 0 would mean "first chunk" to NeMo)
        buffer = self._buffer
        drop = buffer.buffer_idx - self._pre_encode_cache
        if buffer.buffer is not None and drop > 0:
            buffer.buffer = buffer.buffer[:, :, drop:]
            buffer.buffer_idx -= drop
            buffer.streams_length = buffer.streams_length - drop

    def feed(self, samples: np.ndarray) -> list[Partial]:
        """Add samples (1-D float, model rate); returns the partials of the chunks they completed."""
        if self.finished:
            raise AsrInputError("this stream has finished: start a new StreamingSession")
        samples = np.asarray(samples, dtype=np.float32)
        if samples.ndim != 1:
            raise AsrInputError(f"feed takes 1-D mono samples, got an array of shape {samples.shape}")
        self.features.add(samples)
        partials = []
        while self.features.frames_ready() >= self._chunk_end():
            tic = time.perf_counter()
            end = self._chunk_end()
            self._append_features(end, final=False)
            chunk, chunk_lengths = next(iter(self._buffer))
            partials.append(self._decode(chunk, chunk_lengths, is_final=False, audio_frames=end, tic=tic))
        return partials

    def finish(self) -> list[Partial]:
        """End of input: decode the rest; the last partial returned has ``is_final=True``."""
        if self.finished:
            raise AsrInputError("this stream has already finished")
        self.finished = True
        tic = time.perf_counter()
        total = self.features.total_frames()
        self._append_features(total, final=True)
        partials = []
        if self._buffer.buffer is not None and self._buffer.buffer_idx < self._buffer.buffer.size(-1):
            _pad_last_chunk(self._buffer, self._shift_sizes, self._chunk_sizes[0])
            chunks = iter(self._buffer)
            # one chunk is read ahead, so the step that gets the last chunk knows it is the last
            pending = next(chunks, None)
            while pending is not None:
                chunk, chunk_lengths = pending
                pending = next(chunks, None)
                end = total if pending is None else min(self._chunk_end(), total)
                partials.append(self._decode(chunk, chunk_lengths, is_final=pending is None, audio_frames=end,
                                             tic=tic))
                tic = time.perf_counter()
        if not partials:  # everything was decoded by feed (or there was no audio): say that it is final
            last = self._last
            partials.append(Partial(text=last.text if last else "", chunk_index=self._step,
                                    audio_seconds=round(total * self._stride_s, 3), compute_seconds=0.0,
                                    is_final=True, frame_labels=list(last.frame_labels) if last else []))
        return partials


# Pieces that stream_transcribe feeds a session: 100 ms, as a live source delivers them.
STREAM_PIECE_SECONDS = 0.1


def stream_transcribe(
    model,
    audio: str | Path | np.ndarray,
    att_context_size: list[int] | None = None,
) -> Iterator[Partial]:
    """Feed ``audio`` (a file, or float32 samples at the model's rate) to a ``StreamingSession`` in 100 ms
    pieces, as a live source would; yield a ``Partial`` after each chunk, the last one with ``is_final=True``.

    ``att_context_size`` picks one of the look-aheads a multi-look-ahead model was trained with.
    """
    if isinstance(audio, (str, Path)):
        samples = load_audio(audio, int(model.cfg.sample_rate))
    else:
        samples = np.asarray(audio, dtype=np.float32)
    if samples.size == 0:
        raise AsrInputError(f"no audio samples in {audio if isinstance(audio, (str, Path)) else 'the input array'}")
    was_training = model.training
    try:
        session = StreamingSession(model, att_context_size)
        yield from session_partials(session, audio_pieces(samples, session.sample_rate))
    finally:
        model.train(was_training)


def audio_pieces(samples: np.ndarray, sample_rate: int,
                 seconds: float = STREAM_PIECE_SECONDS) -> Iterator[np.ndarray]:
    """``samples`` in consecutive pieces of ``seconds`` (the last may be shorter), as a live source delivers them."""
    piece = max(1, int(seconds * sample_rate))
    return (samples[start: start + piece] for start in range(0, len(samples), piece))


def session_partials(session: StreamingSession, pieces: Iterable[np.ndarray]) -> Iterator[Partial]:
    """Every partial of ``session`` as ``pieces`` arrive, then those of its end (the last is final)."""
    for piece in pieces:
        yield from session.feed(piece)
    yield from session.finish()


def pcm16_samples(data: bytes) -> np.ndarray:
    """Little-endian signed 16-bit PCM bytes as float32 samples in [-1, 1)."""
    return np.frombuffer(data, dtype="<i2").astype(np.float32) / 32768.0


def read_pcm16(stream: BinaryIO, piece_samples: int = 1600) -> Iterator[np.ndarray]:
    """Raw little-endian 16-bit mono PCM from a binary stream (e.g. ``sys.stdin.buffer``), as float32 pieces of
    ``piece_samples`` samples (the last may be shorter), each as soon as it has been read."""
    while True:
        data = stream.read(2 * piece_samples)
        if not data:
            return
        if len(data) % 2:
            more = stream.read(1)
            if not more:
                raise AsrInputError("raw PCM input ended in the middle of a sample: expected 16-bit samples "
                                    "(an even number of bytes)")
            data += more
        yield pcm16_samples(data)


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


def evaluate_manifest_streaming(model, manifest, progress: bool = True, skip: Collection[str] = ()) -> Scored:
    """``duet.asr.evaluation.evaluate_manifest`` (``skip`` as there) through the streaming path; the summary gains a
    ``streaming`` entry (:func:`streaming_report` over every chunk of every file)."""
    check_streaming_model(model)
    partials: list[Partial] = []

    def transcribe(paths):
        texts, parts = transcribe_files_streaming(model, paths, progress=progress)
        partials.extend(parts)
        return texts

    scored = evaluate_manifest(model, manifest, batch_size=1, progress=progress, transcribe=transcribe, skip=skip)
    scored.summary["streaming"] = streaming_report(model, partials)
    return scored
