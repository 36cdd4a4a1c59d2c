"""How ``tools/serve.py`` serves: :class:`ServerSettings`, one field per command-line flag, checked once by
:meth:`ServerSettings.validate` (a bad value is a ``ServerSettingsError`` naming its flag)."""

from __future__ import annotations

from dataclasses import dataclass

from duet.errors import DuetError
from duet.vad import VadSettings

DECODE_BUDGET_PER_SECOND = 48000 * 2  # decoded samples an upload may hold per second of the audio limit


class ServerSettingsError(DuetError, ValueError):
    """A server setting out of range, named by its command-line flag."""


@dataclass(frozen=True)
class ServerSettings:
    """How ``tools/serve.py`` serves; each field is spelt as its flag with dashes (``--max-audio-seconds``)."""

    host: str = "127.0.0.1"
    port: int = 8000
    max_audio_seconds: float = 600.0  # longest recording accepted (upload or stream)
    max_upload_mb: float = 128.0  # largest upload in MiB: 10 min of 44.1 kHz stereo 16-bit WAV is 101
    queue_size: int = 8  # requests waiting for or running on the inference thread; one more is answered 503
    stream_interval: float = 1.0  # the WebSocket re-decodes its audio after this much more of it
    streaming_asr_model: str | None = None  # a cache-aware .nemo for the WebSocket's partials (CacheAwareStream)
    turns: bool = False  # every WebSocket takes turns (the VAD ends each one) unless the client asks ?turns=false
    turn_silence: float = 0.5  # seconds of silence after speech that end a turn
    vad_threshold: float = 0.5  # Silero VAD's speech probability at which a window is speech
    # an upload's rate and channels are decoded before they are averaged and resampled: a 39 kB FLAC of 8 channels
    # at 384 kHz took 1 GB, so both are capped, and the samples an upload decodes to are counted (max_decoded_samples)
    max_sample_rate: int = 96000  # highest sample rate of an upload (Hz)
    max_channels: int = 8  # most channels in an upload
    max_text_chars: int = 4000  # longest /v1/respond text: GPT-2's 1024-token context holds about this much English
    api_key: str | None = None  # when set, every request but the page, its files and /health needs it (Bearer)
    allowed_hosts: tuple[str, ...] = ()  # Host names served besides localhost and IP addresses (DNS rebinding)
    allowed_origins: tuple[str, ...] = ()  # web origins (scheme://host[:port]) allowed besides the page's own
    stream_idle_seconds: float = 60.0  # a WebSocket silent this long ends: its final is sent and it is closed
    # a bundled sample is transcribed and answered before the server serves (duet.serving.warm_up): what the models
    # build on first use is built then, and the first request costs what any other does (--no-warm-up: off)
    warm_up: bool = True

    def validate(self) -> "ServerSettings":
        for name, ok, rule in (("port", 0 <= self.port <= 65535, "in 0..65535"),
                               ("max_audio_seconds", 0 < self.max_audio_seconds <= 24 * 3600, "in (0, 86400]"),
                               ("max_upload_mb", 0 < self.max_upload_mb <= 64 * 1024, "in (0, 65536]"),
                               ("queue_size", self.queue_size >= 1, ">= 1"),
                               ("stream_interval", self.stream_interval > 0, "> 0"),
                               ("turn_silence", self.turn_silence > 0, "> 0"),
                               ("vad_threshold", 0 < self.vad_threshold < 1, "in (0, 1)"),
                               ("max_sample_rate", 8000 <= self.max_sample_rate <= 768000, "in 8000..768000"),
                               ("max_channels", 1 <= self.max_channels <= 64, "in 1..64"),
                               ("max_text_chars", self.max_text_chars >= 1, ">= 1"),
                               ("stream_idle_seconds", self.stream_idle_seconds > 0, "> 0")):
            if not ok:  # nan fails every comparison: refused too
                raise ServerSettingsError(f"--{name.replace('_', '-')} must be {rule}, got {getattr(self, name):g}")
        if self.api_key is not None and len(self.api_key.strip()) < 8:
            raise ServerSettingsError("--api-key must be at least 8 characters")
        return self

    @property
    def max_decoded_samples(self) -> int:
        """Samples (frames x channels) an upload may decode to: the longest recording's worth at 48 kHz stereo
        (57.6 million at the default 600 s; they are averaged and resampled as they are read, so a request holds
        its audio at the model's rate only: 38 MB for 600 s at 16 kHz)."""
        return int(self.max_audio_seconds * DECODE_BUDGET_PER_SECOND)

    def vad_settings(self) -> VadSettings:
        """The WebSocket's VAD: ``--vad-threshold`` and ``--turn-silence``, the rest ``VadSettings``' defaults (a
        turn's audio keeps at most ``turn_silence`` of its silence)."""
        d = VadSettings()
        return VadSettings(threshold=self.vad_threshold, onset_threshold=min(d.onset_threshold, self.vad_threshold),
                           min_silence_s=self.turn_silence, pad_s=min(d.pad_s, self.turn_silence)).validate()

    @property
    def max_upload_bytes(self) -> int:
        return int(self.max_upload_mb * 1024 * 1024)

