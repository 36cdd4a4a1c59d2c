"""Whisper's encoder and log-mel front end as NeMo neural modules, for ``EncDecCTCModelBPE``.

:class:`WhisperLogMelPreprocessor` computes exactly the features Whisper was trained on (16 kHz, STFT 400/160
with a Hann window, power spectrum, 80 Slaney mel filters, log10 floored at 1e-10 and at 8 below the
utterance's maximum, then ``(x + 4) / 4``), one utterance at a time so that padding in a batch never changes a
frame. :class:`WhisperEncoder` is Whisper's audio encoder (two GELU convolutions, the second of stride 2, learned
positions, pre-LN transformer blocks, a final LayerNorm) taking any length: positions are sliced to the input (a
recording longer than Whisper's 30 s window is read in overlapping 30 s windows, their frames joined), padded frames are masked out of attention, and the frames past an utterance's end are
zeroed between the convolutions, so an utterance encodes the same alone or in a padded batch. Optional
``adapter_layers`` are new blocks on top of the pretrained ones (randomly initialised), for the CTC head to
read a representation trained for it while the pretrained layers keep a low learning rate.

Both are registered with NeMo as ``_target_`` classes (``duet.nemo_targets``), so a ``.nemo`` using them restores
through ``ASRModel.restore_from`` like any other. The weights come from ``duet.asr.whisper_import``.
"""

from __future__ import annotations

import math
from collections import OrderedDict

import librosa
import torch
import torch.nn.functional as F
from torch import nn

from nemo.collections.asr.modules.audio_preprocessing import AudioPreprocessor
from nemo.core.classes import Exportable, NeuralModule, typecheck
from nemo.core.neural_types import (
    AcousticEncodedRepresentation,
    AudioSignal,
    LengthsType,
    MelSpectrogramType,
    NeuralType,
    SpectrogramType,
)

SAMPLE_RATE = 16000
N_FFT = 400
HOP_LENGTH = 160
N_MELS = 80
# Whisper's encoder sees at most 30 s: 3000 feature frames, 1500 after the stride-2 convolution
MAX_POSITIONS = 1500
FRAMES_PER_SECOND = SAMPLE_RATE / HOP_LENGTH / 2


def whisper_log_mel(audio: torch.Tensor, filters: torch.Tensor, window: torch.Tensor) -> torch.Tensor:
    """Whisper's log-mel features of one 1-D waveform: [n_mels, len(audio) // 160]."""
    stft = torch.stft(audio, N_FFT, HOP_LENGTH, window=window, center=True, pad_mode="reflect", return_complex=True)
    power = stft[..., :-1].abs() ** 2
    log_spec = torch.clamp(filters @ power, min=1e-10).log10()
    if log_spec.shape[-1]:
        log_spec = torch.maximum(log_spec, log_spec.max() - 8.0)
    return (log_spec + 4.0) / 4.0


class WhisperLogMelPreprocessor(AudioPreprocessor):
    """Waveforms [B, T] -> Whisper log-mel features [B, 80, T // 160]; frames past an utterance's end are 0."""

    def __init__(self, sample_rate: int = SAMPLE_RATE, features: int = N_MELS, window_size: float = N_FFT / SAMPLE_RATE,
                 window_stride: float = HOP_LENGTH / SAMPLE_RATE):
        # window_size/window_stride only state the fixed framing for code that reads them from the config
        # (NeMo's timestamps: seconds per frame = window_stride x the encoder's subsampling_factor)
        if sample_rate != SAMPLE_RATE or round(window_size * SAMPLE_RATE) != N_FFT or round(window_stride * SAMPLE_RATE) != HOP_LENGTH:
            raise ValueError(f"Whisper's features are defined at {SAMPLE_RATE} Hz with {N_FFT / SAMPLE_RATE} s windows "
                             f"every {HOP_LENGTH / SAMPLE_RATE} s, not {sample_rate} Hz, {window_size} s, {window_stride} s")
        super().__init__(win_length=N_FFT, hop_length=HOP_LENGTH)
        self._sample_rate = sample_rate
        self.features = features
        filters = librosa.filters.mel(sr=SAMPLE_RATE, n_fft=N_FFT, n_mels=features)  # Slaney scale and norm
        self.register_buffer("mel_filters", torch.from_numpy(filters).float(), persistent=False)
        self.register_buffer("window", torch.hann_window(N_FFT), persistent=False)

    @property
    def input_types(self):
        return {
            "input_signal": NeuralType(("B", "T"), AudioSignal(freq=self._sample_rate)),
            "length": NeuralType(tuple("B"), LengthsType()),
        }

    @property
    def output_types(self):
        return {
            "processed_signal": NeuralType(("B", "D", "T"), MelSpectrogramType()),
            "processed_length": NeuralType(tuple("B"), LengthsType()),
        }

    def get_features(self, input_signal, length):
        frames = torch.div(length, HOP_LENGTH, rounding_mode="floor").long()
        out = input_signal.new_zeros(input_signal.shape[0], self.features, int(frames.max()) if len(frames) else 0)
        for i in range(input_signal.shape[0]):
            n = int(length[i])
            if n >= N_FFT // 2 + 1:  # reflect padding needs at least this many samples
                out[i, :, : int(frames[i])] = whisper_log_mel(input_signal[i, :n], self.mel_filters, self.window)
            else:
                frames[i] = 0
        return out, frames


class WhisperBlock(nn.Module):
    """One pre-LN transformer block as in Whisper: fused q/k/v projection, 1/sqrt(d_head) scaled dot product."""

    def __init__(self, d_model: int, n_heads: int, ff_dim: int, dropout: float = 0.0):
        super().__init__()
        self.n_heads = n_heads
        self.attn_ln = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.mlp_ln = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(OrderedDict(fc1=nn.Linear(d_model, ff_dim), act=nn.GELU(), fc2=nn.Linear(ff_dim, d_model)))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, key_mask: torch.Tensor | None) -> torch.Tensor:
        batch, time, d_model = x.shape
        q, k, v = self.qkv(self.attn_ln(x)).view(batch, time, 3, self.n_heads, d_model // self.n_heads).unbind(2)
        attended = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                  attn_mask=key_mask)
        x = x + self.dropout(self.out(attended.transpose(1, 2).reshape(batch, time, d_model)))
        return x + self.dropout(self.mlp(self.mlp_ln(x)))


class WhisperEncoder(NeuralModule, Exportable):
    """Whisper's audio encoder over features [B, 80, T] -> [B, d_model, ceil(T / 2)] at 50 frames a second.

    Args:
        feat_in: feature channels (80 for Whisper tiny.en).
        d_model, n_heads, n_layers, ff_dim: the pretrained model's shape (tiny.en: 384, 6, 4, 1536).
        max_positions: learned positions (1500 = 30 s); a longer input is read in overlapping windows of them.
        dropout: dropout on every block's residual branches while training (Whisper itself has none).
        adapter_layers: new blocks after the pretrained ones (and a LayerNorm after them), randomly initialised.
        adapter_ff_dim: their MLP width (default ff_dim); narrower blocks keep a bundled checkpoint small.
    """

    def __init__(self, feat_in: int = N_MELS, d_model: int = 384, n_heads: int = 6, n_layers: int = 4,
                 ff_dim: int = 1536, max_positions: int = MAX_POSITIONS, dropout: float = 0.0, adapter_layers: int = 0,
                 adapter_ff_dim: int | None = None):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model {d_model} is not a multiple of n_heads {n_heads}")
        self.d_model, self.max_positions = d_model, max_positions
        self.subsampling_factor = 2  # feature frames per encoder frame (NeMo's timestamps read it)
        self._feat_in, self._feat_out = feat_in, d_model
        self.conv1 = nn.Conv1d(feat_in, d_model, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(d_model, d_model, kernel_size=3, stride=2, padding=1)
        self.register_buffer("positions", torch.zeros(max_positions, d_model))
        self.layers = nn.ModuleList(WhisperBlock(d_model, n_heads, ff_dim, dropout) for _ in range(n_layers))
        self.ln_post = nn.LayerNorm(d_model)
        if adapter_ff_dim is not None and adapter_ff_dim < 1:
            raise ValueError(f"adapter_ff_dim must be >= 1, got {adapter_ff_dim}")
        self.adapter = nn.ModuleList(WhisperBlock(d_model, n_heads, ff_dim if adapter_ff_dim is None else adapter_ff_dim,
                                                  dropout) for _ in range(adapter_layers))
        self.adapter_ln = nn.LayerNorm(d_model) if adapter_layers else None

    @property
    def input_types(self):
        return OrderedDict(
            audio_signal=NeuralType(("B", "D", "T"), SpectrogramType()),
            length=NeuralType(tuple("B"), LengthsType()),
        )

    @property
    def output_types(self):
        return OrderedDict(
            outputs=NeuralType(("B", "D", "T"), AcousticEncodedRepresentation()),
            encoded_lengths=NeuralType(tuple("B"), LengthsType()),
        )

    def adapter_parameters(self):
        """The parameters of the new blocks on top of Whisper's (empty without an adapter)."""
        return list(self.adapter.parameters()) + (list(self.adapter_ln.parameters()) if self.adapter_ln is not None else [])

    def pretrained_parameters(self):
        """The parameters that come from Whisper (everything but the adapter)."""
        adapter = {id(p) for p in self.adapter_parameters()}
        return [p for p in self.parameters() if id(p) not in adapter]

    def input_example(self, max_batch: int = 1, max_dim: int = 400):
        device = next(self.parameters()).device
        max_dim = min(max_dim, 2 * self.max_positions)  # the traced graph reads one window (no windowing inside)
        features = torch.randn(max_batch, self._feat_in, max_dim, device=device)
        lengths = torch.full((max_batch,), max_dim, dtype=torch.int64, device=device)
        return features, lengths

    def encode_pretrained(self, audio_signal: torch.Tensor, length: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Whisper's own layers: features [B, 80, T] -> frames [B, ceil(T / 2), d_model] after its final LayerNorm."""
        features_time = audio_signal.shape[-1]
        time_index = torch.arange(features_time, device=audio_signal.device)
        x = F.gelu(self.conv1(audio_signal))
        # conv2 reads one frame past each end: zeros there, as for the utterance alone
        x = x * (time_index[None, :] < length[:, None]).unsqueeze(1).to(x.dtype)
        x = F.gelu(self.conv2(x))
        encoded_lengths = torch.div(length + 1, 2, rounding_mode="floor")
        x = x.transpose(1, 2)
        if x.shape[1] <= self.max_positions or torch.jit.is_tracing() or torch.onnx.is_in_onnx_export():
            return self._blocks(x, encoded_lengths), encoded_lengths
        return self._windowed_blocks(x, encoded_lengths), encoded_lengths

    def _blocks(self, x: torch.Tensor, encoded_lengths: torch.Tensor) -> torch.Tensor:
        """Positions, the pretrained blocks and the final LayerNorm over frames [B, T <= max_positions, d_model]."""
        x = x + self.positions[: x.shape[1]].to(x.dtype)
        key_mask = self._valid(x, encoded_lengths)[:, None, None, :]  # [B, 1, 1, T]: every query reads only real frames
        for layer in self.layers:
            x = layer(x, key_mask)
        return self.ln_post(x)

    def _windowed_blocks(self, x: torch.Tensor, encoded_lengths: torch.Tensor) -> torch.Tensor:
        """:meth:`_blocks` over input longer than the learned positions (30 s), as NeMo's CTC models take any length:
        the windows of :func:`window_spans`, each read as Whisper reads a window."""
        pieces = []
        for start, end, first, last in window_spans(x.shape[1], self.max_positions):
            # an utterance of the batch that ended before this window still reads one frame (no empty softmax)
            lengths = (encoded_lengths - start).clamp(min=1, max=end - start)
            pieces.append(self._blocks(x[:, start:end], lengths)[:, first:last])
        return torch.cat(pieces, dim=1)

    def apply_adapter(self, x: torch.Tensor, encoded_lengths: torch.Tensor) -> torch.Tensor:
        """The adapter blocks (if any) over frames [B, T, d_model]; frames past each utterance's end are zeroed."""
        valid = self._valid(x, encoded_lengths)
        if self.adapter_ln is not None:
            for layer in self.adapter:
                x = layer(x, valid[:, None, None, :])
            x = self.adapter_ln(x)
        return x * valid.unsqueeze(-1).to(x.dtype)

    @staticmethod
    def _valid(x: torch.Tensor, encoded_lengths: torch.Tensor) -> torch.Tensor:
        return torch.arange(x.shape[1], device=x.device)[None, :] < encoded_lengths[:, None]

    @typecheck()
    def forward(self, audio_signal: torch.Tensor, length: torch.Tensor):
        x, encoded_lengths = self.encode_pretrained(audio_signal, length)
        return self.apply_adapter(x, encoded_lengths).transpose(1, 2), encoded_lengths


def window_spans(frames: int, window: int) -> list[tuple[int, int, int, int]]:
    """How :class:`WhisperEncoder` reads ``frames`` encoded frames through ``window`` learned positions: windows
    overlapping by a sixth (5 s at 30 s), the middle of each overlap kept from each side so that every frame has
    context on both sides. (start, end, first, last) per window: it reads frames [start, end) and keeps its own
    frames [first, last); one window (0, frames, 0, frames) when they fit. The ONNX engine windows its graph's
    input the same way (``duet.asr.onnx_engine``)."""
    overlap = max(2, window // 6) // 2 * 2
    hop, half = window - overlap, overlap // 2
    spans = []
    for start in range(0, frames, hop):
        end = min(start + window, frames)
        spans.append((start, end, 0 if start == 0 else half, end - start if end == frames else end - start - half))
        if end == frames:
            break
    return spans


def init_adapter(encoder: WhisperEncoder) -> None:
    """Start each adapter block as a small perturbation of the identity: output projections scaled down."""
    for block in encoder.adapter:
        for linear in (block.out, block.mlp.fc2):
            nn.init.normal_(linear.weight, std=0.02 / math.sqrt(2 * max(1, len(encoder.adapter))))
            nn.init.zeros_(linear.bias)
