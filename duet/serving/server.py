"""The voice pipeline over HTTP: an OpenAI-compatible transcription endpoint, the whole pipeline, the language
model alone, a WebSocket that streams partial transcripts from a microphone, and a page that uses them.

``create_app(pipeline, settings)`` builds the FastAPI app around an already loaded
:class:`~duet.pipeline.VoicePipeline` (``tools/serve.py`` loads the models once, as ``tools/pipeline.py`` does;
tests pass small in-memory ones). Every model call runs on one inference thread (:class:`InferenceWorker`), so
requests never share a model call, and at most ``ServerSettings.queue_size`` requests wait for it or run on it:
one more is answered 503. Language-model options are per request: each request answers with its own copy of
the pipeline's settings, never by changing the pipeline's.

Uploads are written to a temporary file and read by libsndfile (WAV, FLAC, OGG, MP3; up to
``max_sample_rate`` and ``max_channels``, resampled to the model's 16 kHz mono, their samples counted from the header
before any decoding and again while reading); what libsndfile cannot read (WebM/Opus from a browser's
MediaRecorder, MP4/AAC) is decoded by ffmpeg allowed audio containers only (:func:`decode_with_ffmpeg`). Bad
requests get a 4xx JSON ``{"error": "..."}`` naming the field, never a server path; a full queue a 503 with
``Retry-After``. :class:`RequestGuard` stands in front of every route: Host and Origin checks (DNS rebinding, other
pages), the optional API key, and bodies bounded as they arrive.

The WebSocket (``/v1/stream``) takes 16 kHz mono PCM16 little-endian in binary messages, and a text message
``{"type": "end"}`` when the recording ends; it sends ``{"type": "partial", ...}`` as audio arrives and one
``{"type": "final", ...}`` with the transcript and the answer (see :class:`RedecodeStream` for how partials
are made with an offline model, and what they cost, and :class:`CacheAwareStream` for a cache-aware model). The
socket is read apart from the decoding (:class:`StreamInbox`), so a client sending faster than real time keeps
answering pings and gets its final; a socket silent for ``stream_idle_seconds`` gets its final and is closed, and
one that goes past ``max_audio_seconds`` gets the final of the audio up to the limit (``"ended_by": "limit: ..."``)
and is closed with 1009.
Silero VAD (``duet.vad``) listens too: ``{"type": "speech_start" | "speech_end", "turn", "at_s", "decided_at_s"}``
say where speech began and stopped. With ``?turns=true`` (or ``ServerSettings.turns``) the socket takes turns
(:class:`TurnsSession`): each time the speaker stops, the final transcript and answer of that turn are sent
(``"turn": n``) and the socket listens for the next, until ``{"type": "end"}``, answered by ``{"type": "done"}``.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import dataclasses
import hmac
import ipaddress
import json
import logging
import math
import re
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Callable

import librosa
import numpy as np
import soundfile as sf
import soxr
from fastapi import FastAPI, File, Form, Request, UploadFile, WebSocket, WebSocketDisconnect
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, PlainTextResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException

from duet.asr.streaming import StreamingSession, pcm16_samples, streaming_latency
from duet.asr.words import TimedTranscript
from duet.asr.confidence import utterance_confidence
from duet.errors import DuetError
from duet.io import truncation_problem
from duet.pipeline import PipelineResult, VoicePipeline, is_silent
from duet.speech_out import SPEAK_ENGINE, speak_wav_bytes
from duet.serving.turns import TurnEvent, TurnTaker
from duet.vad import SAMPLE_RATE as VAD_SAMPLE_RATE, SpeechDetector, VadEvent, VadSettings
from duet.foundation.errors import first_line, is_disk_full
from slm.generation import ContextLengthError, GenerationSettings, GenerationSettingsError

log = logging.getLogger(__name__)

WEB_FOLDER = Path(__file__).parent / "web"
FFMPEG = "ffmpeg"
RESPONSE_FORMATS = ("json", "text", "verbose_json", "srt", "vtt")  # OpenAI's five
STREAM_SAMPLE_RATE = 16000  # what the WebSocket takes: 16 kHz mono PCM16 little-endian
DECODE_BUDGET_PER_SECOND = 48000 * 2  # decoded samples an upload may hold per second of the audio limit
# the demuxers ffmpeg may use for an upload: audio containers only. Playlists (HLS), concat lists and the other
# demuxers that open further files or URLs are not among them, so an upload can never make the server read a file
FFMPEG_DEMUXERS = ("matroska,webm", "ogg", "mp3", "mov,mp4,m4a,3gp,3g2,mj2", "aac", "wav", "flac", "aiff", "caf")
FFMPEG_SECONDS = 120  # an ffmpeg decode taking longer than this is refused (a decode of 10 min of Opus takes ~2 s)
BODY_SLACK_BYTES = 64 * 1024  # multipart headers and form fields around the upload itself


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


class RequestError(DuetError):
    """A request the server refuses, with its HTTP status; the message names the field."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.headers = headers


def error_response(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


class InferenceWorker:
    """One thread that owns the models; at most ``capacity`` requests hold a slot (wait for it or run on it).

    A request takes a slot with :meth:`slot` for its whole life (audio decoding included, which runs beside
    the worker), then runs its model calls with :meth:`run`. The count is a plain locked integer, not an
    asyncio primitive, so it holds whatever event loop the request runs on.
    """

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.active = 0
        self._lock = threading.Lock()
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="duet-inference")
        # the last calls' wait for the thread and run on it (seconds): /health's queue figures and Retry-After
        self.waits: collections.deque[float] = collections.deque(maxlen=200)
        self.runs: collections.deque[float] = collections.deque(maxlen=200)

    def _try_take(self) -> bool:
        with self._lock:
            if self.active >= self.capacity:
                return False
            self.active += 1
            return True

    @contextlib.asynccontextmanager
    async def slot(self, wait: bool = False):
        """Hold one of the ``capacity`` slots; when all are taken, a 503 ``RequestError`` (or, with ``wait``,
        wait for one: the WebSocket's audio then queues in its connection)."""
        while not self._try_take():
            if not wait:
                retry = self.retry_after()
                raise RequestError(503, f"server busy: {self.capacity} requests are already queued; retry in "
                                        f"{retry} s", headers={"Retry-After": str(retry)})
            await asyncio.sleep(0.02)
        try:
            yield
        finally:
            with self._lock:
                self.active -= 1

    async def run(self, fn: Callable, *args):
        """``fn(*args)`` on the inference thread, after the calls queued before it."""
        submitted = time.perf_counter()

        def timed():
            started = time.perf_counter()
            self.waits.append(started - submitted)
            try:
                return fn(*args)
            finally:
                self.runs.append(time.perf_counter() - started)
        return await asyncio.get_running_loop().run_in_executor(self._executor, timed)

    def retry_after(self) -> int:
        """Seconds a refused client should wait: about as long as the queue takes to drain once (the median call
        times the slots), 1 to 60."""
        run = statistics.median(self.runs) if self.runs else 1.0
        return max(1, min(60, math.ceil(run * self.capacity)))

    def figures(self) -> dict:
        """/health's queue: slots taken, capacity, and the last 200 calls' wait for the thread and time on it."""
        def spread(values) -> dict | None:
            if not values:
                return None
            ordered = sorted(values)
            return {"median": round(ordered[len(ordered) // 2], 4),
                    "p95": round(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], 4),
                    "max": round(ordered[-1], 4)}
        return {"active": self.active, "capacity": self.capacity, "calls": len(self.runs),
                "wait_s": spread(list(self.waits)), "run_s": spread(list(self.runs))}

    def close(self) -> None:
        self._executor.shutdown(wait=True)


# ------------------------------------------------------------------------------------------------ audio


def decode_audio_file(path: Path, sample_rate: int, settings: ServerSettings, field: str = "file") -> np.ndarray:
    """Mono float32 at ``sample_rate`` from an uploaded file: libsndfile where it knows the format, else ffmpeg
    restricted to audio containers (:func:`decode_with_ffmpeg`).

    Refused before any decoding, from the header: a sample rate over ``max_sample_rate``, more than
    ``max_channels`` channels (400), more than ``max_audio_seconds`` or more samples than ``max_decoded_samples``
    (413), a file cut short (400, :func:`duet.io.truncation_problem`, the check ``tools/pipeline.py`` makes). The
    samples are read in blocks, averaged to mono and resampled as they come (:func:`read_mono_blocks`), counted
    against the same limits (a header can lie), so a request holds its audio at ``sample_rate`` only (10 min at
    16 kHz: 38 MB); a decoder error (a FLAC cut short, corrupt data) is a 400. No message names a server path."""
    if path.stat().st_size == 0:
        raise RequestError(400, f"{field}: the upload is empty (0 bytes)")
    try:
        info = sf.info(str(path))
    except (sf.LibsndfileError, RuntimeError, OSError):
        audio = decode_with_ffmpeg(path, sample_rate, settings.max_audio_seconds, field)
    else:
        check_audio_header(info.samplerate, info.channels, info.frames, settings, field)
        if problem := truncation_problem(info):
            raise RequestError(400, f"{field}: cannot decode the audio ({problem})")
        audio = read_mono_blocks(path, info.samplerate, info.channels, settings, field, sample_rate)
    if len(audio) == 0:
        raise RequestError(400, f"{field}: the audio is empty (no samples)")
    if len(audio) > settings.max_audio_seconds * sample_rate:
        raise too_long(settings, field)
    return audio


def too_long(settings: ServerSettings, field: str) -> RequestError:
    return RequestError(413, f"{field}: the audio is longer than the limit of {settings.max_audio_seconds:g} s")


def check_audio_header(rate: int, channels: int, frames: int, settings: ServerSettings, field: str) -> None:
    """Refuse, by what the header says, audio over the server's rate, channel, length or decoded-sample limits."""
    if rate > settings.max_sample_rate:
        raise RequestError(400, f"{field}: sample rate {rate} Hz is above the server's limit of "
                                f"{settings.max_sample_rate} Hz")
    if channels > settings.max_channels:
        raise RequestError(400, f"{field}: {channels} channels are more than the server's limit of "
                                f"{settings.max_channels}")
    if frames > settings.max_audio_seconds * rate:
        raise too_long(settings, field)
    if frames * channels > settings.max_decoded_samples:
        raise RequestError(413, f"{field}: {frames / rate:g} s of {channels} channels at {rate} Hz decode to "
                                f"{frames * channels:,} samples, more than the limit of "
                                f"{settings.max_decoded_samples:,} ({settings.max_audio_seconds:g} s at 48 kHz stereo)")


def read_mono_blocks(path: Path, rate: int, channels: int, settings: ServerSettings, field: str,
                     sample_rate: int) -> np.ndarray:
    """The file's samples at ``sample_rate``, block by block: each block averaged to mono (as ``duet.io.read_mono``
    averages) and resampled as it comes (soxr's stream of librosa's default ``soxr_hq``: the same samples as
    ``librosa.resample`` of the whole), so that only the ``sample_rate`` audio is ever held, whatever the upload's
    rate; a 413 as soon as the samples pass the limits, whatever the header said."""
    limit = min(settings.max_audio_seconds * rate, settings.max_decoded_samples / channels)
    resampler = None if rate == sample_rate else soxr.ResampleStream(rate, sample_rate, 1, dtype="float32",
                                                                      quality="HQ")
    pieces, frames = [], 0
    try:
        with sf.SoundFile(str(path)) as audio_file:
            for block in audio_file.blocks(blocksize=1 << 16, dtype="float32", always_2d=True):
                frames += len(block)
                if frames > limit:
                    raise too_long(settings, field)
                mono = block.mean(axis=1)
                pieces.append(mono if resampler is None else resampler.resample_chunk(mono))
    except (sf.LibsndfileError, RuntimeError, OSError) as e:
        reason = without_paths(first_line(e), path)
        raise RequestError(400, f"{field}: cannot decode the audio (corrupt or truncated: {reason})") from None
    if resampler is None:
        return np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.float32)
    pieces.append(resampler.resample_chunk(np.zeros(0, dtype=np.float32), last=True))
    # librosa.resample's length: ceil(frames x the ratio)
    return librosa.util.fix_length(np.concatenate(pieces), size=math.ceil(frames * sample_rate / rate))


def without_paths(message: str, path: Path | None = None) -> str:
    """``message`` with the upload's ``path`` as "the upload" and any other absolute path as "<path>": a client
    never learns where the server keeps its files."""
    if path is not None:
        for name in (f"file:{path}", str(path), str(path.parent)):
            message = message.replace(name, "the upload")
    return re.sub(r"(?:file:)?/[^\s'\"]+", "<path>", message)


def internal_error(error: BaseException) -> str:
    """What a client is told of a failure that is not its fault: its first line, no server path."""
    return f"internal error: {without_paths(first_line(error))}"


def decode_with_ffmpeg(path: Path, sample_rate: int, max_seconds: float, field: str) -> np.ndarray:
    """What libsndfile cannot read (WebM/Opus from a browser, MP4/AAC) through ffmpeg, allowed only the demuxers of
    ``FFMPEG_DEMUXERS`` and the file protocol on this one file, its audio alone, output mono at ``sample_rate``."""
    engine = shutil.which(FFMPEG)
    if engine is None:
        raise RequestError(400, f"{field}: not audio libsndfile reads (WAV, FLAC, OGG), and {FFMPEG}, which "
                                "reads MP3 and WebM, is not installed on the server")
    # decoding stops just past the limit, so an hour-long MP3 costs no more than the limit's worth
    command = [engine, "-nostdin", "-v", "error", "-protocol_whitelist", "file,pipe",
               "-format_whitelist", ",".join(FFMPEG_DEMUXERS), "-i", f"file:{path}", "-map", "0:a:0",
               "-vn", "-sn", "-dn", "-t", f"{max_seconds + 1:g}", "-f", "f32le", "-ac", "1", "-ar", str(sample_rate),
               "pipe:1"]
    try:
        result = subprocess.run(command, capture_output=True, timeout=FFMPEG_SECONDS)
    except subprocess.TimeoutExpired:
        raise RequestError(400, f"{field}: cannot decode the audio (ffmpeg took over {FFMPEG_SECONDS} s)") from None
    if result.returncode != 0:
        reason = without_paths(first_line(result.stderr.decode(errors="replace").strip() or " "), path).strip()
        if "not on whitelist" in reason or "Invalid data found" in reason:
            reason = f"not an audio file this server reads ({', '.join(AUDIO_CONTAINERS)})"
        reason = reason or f"ffmpeg exit code {result.returncode}"
        raise RequestError(400, f"{field}: cannot decode the audio ({reason})")
    return np.frombuffer(result.stdout, dtype="<f4").astype(np.float32)


@contextlib.contextmanager
def disk_full_named(what: str):
    """A full disk while ``what`` (loading the models: NeMo unpacks a .nemo into the temporary folder) as one line
    naming the path, a ``DuetError``, instead of a traceback."""
    try:
        yield
    except OSError as e:
        if not is_disk_full(e):
            raise
        raise DuetError(f"{what}: no space left on the device holding {e.filename or tempfile.gettempdir()} "
                        "(free some, or point TMPDIR elsewhere)") from None


AUDIO_CONTAINERS = ("WAV", "FLAC", "OGG/Opus", "MP3", "WebM", "MP4/M4A", "AAC", "AIFF", "CAF")


def upload_suffix(filename: str | None) -> str:
    """The upload's file ending, letters and digits only (a NUL byte or a slash in a client's name never reaches
    the file system); libsndfile and ffmpeg sniff the content, the ending only helps them."""
    suffix = Path((filename or "").replace("\x00", "")).suffix[:10]
    return suffix if re.fullmatch(r"\.[A-Za-z0-9]+", suffix) else ""


async def read_upload(upload: UploadFile, settings: ServerSettings, sample_rate: int) -> np.ndarray:
    """The upload's audio, written to a temporary file (at most ``max_upload_bytes``) and decoded beside the
    event loop. A full disk is a 507 (the server's log names the folder; the client is told no path)."""
    limit = settings.max_upload_bytes
    try:
        with tempfile.TemporaryDirectory(prefix="duet-upload-") as folder:
            path = Path(folder) / ("upload" + upload_suffix(upload.filename))
            size = 0
            with open(path, "wb") as out:
                while chunk := await upload.read(1 << 20):
                    size += len(chunk)
                    if size > limit:
                        raise RequestError(413, f"file: the upload is larger than the limit of "
                                                f"{settings.max_upload_mb:g} MiB")
                    out.write(chunk)
            return await asyncio.to_thread(decode_audio_file, path, sample_rate, settings)
    except OSError as e:
        if not is_disk_full(e):
            raise
        log.error("no space left for an upload in %s", tempfile.gettempdir())
        raise RequestError(507, "file: the server has no disk space left for the upload; retry later") from None



# ------------------------------------------------------------------------------------------------ streaming


class RedecodeStream:
    """Partial transcripts of a growing recording with an offline (non-streaming) model.

    :meth:`feed` appends audio, and once ``interval_s`` more of it has arrived decodes the whole buffer again
    (``transcribe``: the pipeline's own cut-at-pauses decoding), returning the new partial transcript; the
    final transcript (:meth:`finish`) is one more decode of everything. The cost grows with the square of the
    stream's length: the k-th decode covers k x ``interval_s`` seconds, so n intervals cost n(n+1)/2 interval's
    worth of decoding; :meth:`report` gives the measured time per decode (the last one is the largest). Once
    a decode takes longer than ``interval_s``, the next waits for as much new audio as that decode took, so
    the partials thin out instead of falling behind a live stream.

    :class:`CacheAwareStream` has the same interface (``feed(pcm) -> partial text or None``, ``finish() -> final
    text``, ``report() -> dict``).
    """

    def __init__(self, transcribe: Callable[[np.ndarray], str], sample_rate: int, interval_s: float,
                 transcribe_final: Callable[[np.ndarray], TimedTranscript] | None = None):
        self.transcribe = transcribe
        # the final decode, with word confidences (they cost 4-11 % more CPU: the partials go without)
        self.transcribe_final = transcribe_final
        self.sample_rate = sample_rate
        self.interval = int(interval_s * sample_rate)
        self.interval_s = interval_s
        self.pieces: list[np.ndarray] = []
        self.samples = 0
        self.decoded_at = 0  # samples in the buffer at the last decode
        self.text = ""
        self.confidence: float | None = None  # the final transcript's (duet.asr.confidence), with transcribe_final
        self.decode_seconds: list[float] = []

    def _decode(self, final: bool = False) -> str:
        audio = np.concatenate(self.pieces) if self.pieces else np.zeros(0, dtype=np.float32)
        self.pieces = [audio]
        self.decoded_at = self.samples
        start = time.perf_counter()
        if len(audio) == 0 or is_silent(audio, self.sample_rate):
            text = ""
        elif final and self.transcribe_final is not None:
            timed = self.transcribe_final(audio)
            text, self.confidence = timed.text, utterance_confidence(timed.words)
        else:
            text = self.transcribe(audio)
        self.decode_seconds.append(time.perf_counter() - start)
        return text

    def feed(self, pcm: np.ndarray) -> str | None:
        """Add mono float32 samples; the partial transcript of everything so far when this call decoded, else
        None."""
        self.pieces.append(pcm)
        self.samples += len(pcm)
        # at least as much new audio as the last decode took to run: decoding then keeps pace with a live stream
        # (at the cost of fewer partials) instead of falling further behind with every decode
        last = self.decode_seconds[-1] if self.decode_seconds else 0.0
        due = max(self.interval, int(last * self.sample_rate))
        if self.samples - self.decoded_at < due:
            return None
        self.text = self._decode()
        return self.text

    def finish(self) -> str:
        """The transcript of everything fed (decoded again unless nothing came since the last decode, or, with
        ``transcribe_final``, always: the partials have no confidence)."""
        if self.samples != self.decoded_at or not self.decode_seconds or self.transcribe_final is not None:
            self.text = self._decode(final=True)
        return self.text

    def report(self) -> dict:
        times = self.decode_seconds
        return {"decoder": "re-decode", "interval_s": self.interval_s,
                "audio_s": round(self.samples / self.sample_rate, 3), "decodes": len(times),
                "decode_s_median": round(statistics.median(times), 4) if times else None,
                "decode_s_last": round(times[-1], 4) if times else None}


class CacheAwareStream:
    """Partial transcripts of a live recording with a cache-aware streaming model
    (:class:`duet.asr.streaming.StreamingSession`): each chunk of audio is encoded once, carrying the encoder's
    caches, so a chunk costs the same at the first second as at the tenth minute, and the final transcript is
    ready one chunk after the recording ends. Same interface as :class:`RedecodeStream`."""

    def __init__(self, model):
        self.model = model
        self.session = StreamingSession(model)
        self.samples = 0
        self.text = ""
        self.confidence = None  # the streaming step gives no word confidences
        # one compute time per chunk, not the partials: each partial holds every frame label so far
        self.chunk_seconds: list[float] = []

    def _take(self, partials) -> bool:
        self.chunk_seconds += [p.compute_seconds for p in partials]
        text = partials[-1].text.strip() if partials else self.text
        changed, self.text = text != self.text, text
        return changed

    def feed(self, pcm: np.ndarray) -> str | None:
        """Add mono float32 samples; the partial transcript when a chunk completed and changed it, else None."""
        self.samples += len(pcm)
        return self.text if self._take(self.session.feed(pcm)) else None

    def finish(self) -> str:
        self._take(self.session.finish())
        return self.text

    def report(self) -> dict:
        latency = self.session.latency
        ms = [1000 * s for s in self.chunk_seconds] or [0.0]
        return {"decoder": "cache-aware", "audio_s": round(self.samples / STREAM_SAMPLE_RATE, 3),
                "chunks": len(self.chunk_seconds), "chunk_ms": latency.chunk_ms, "lookahead_ms": latency.lookahead_ms,
                "chunk_compute_ms_median": round(statistics.median(ms), 2), "chunk_compute_ms_max": round(max(ms), 2)}


def stream_decoder_note(settings: ServerSettings, streaming_model=None) -> str:
    """How the WebSocket makes partial transcripts, for /health and each final message."""
    if streaming_model is not None:
        return (f"cache-aware streaming model {settings.streaming_asr_model or 'given'} "
                f"({streaming_latency(streaming_model).describe()}): each chunk encoded once; the final "
                "transcript and the answer come from it")
    return f"re-decode of the whole buffer every {settings.stream_interval:g} s of new audio (offline model)"


def vad_message(kind: str, turn: int, at_s: float | None, decided_at_s: float | None) -> dict:
    return {"type": kind, "turn": turn, "at_s": at_s, "decided_at_s": decided_at_s}


def vad_event_message(event: VadEvent, turn: int) -> dict:
    return vad_message(event.kind, turn, event.seconds(), round(event.decided_at / VAD_SAMPLE_RATE, 3))


def check_end_message(message: dict) -> None:
    """A WebSocket text message must be ``{"type": "end"}`` (audio goes in binary messages); else a 400."""
    try:
        control = json.loads(message.get("text") or "")
    except json.JSONDecodeError:
        control = None
    if not isinstance(control, dict) or control.get("type") != "end":
        raise RequestError(400, 'text messages: only {"type": "end"} is understood (audio goes in binary messages)')


CATCH_UP_SECONDS = 10.0  # a stream's decoding this far behind its audio takes all that waits in one piece


class StreamInbox:
    """The audio a WebSocket received and its decoding has not taken yet.

    The socket's reader puts each message here and goes straight back to reading, so the server reads (and
    answers the client's pings) however far decoding is behind: a client sending faster than real time is never
    cut off by a keepalive timeout. What waits is bounded by the stream's length limit (``limit`` samples in all,
    10 min of 16 kHz float32 is 38 MB); while decoding is at most ``CATCH_UP_SECONDS`` behind it takes one message
    at a time (the partials come as they would live), further behind it takes all that waits at once. Audio past
    the limit is not kept: the stream is cut there (``cut``) and its transcript covers the limit's worth."""

    def __init__(self, limit: int):
        self.limit = limit
        self.received = 0
        self.cut = False  # a message went past the limit: its head was kept, the rest dropped
        self.pieces: collections.deque[np.ndarray] = collections.deque()
        self.waiting = 0
        self.closed = False
        self.ready = asyncio.Event()

    def put(self, pcm: np.ndarray) -> None:
        if self.received + len(pcm) > self.limit:
            pcm, self.cut = pcm[:self.limit - self.received], True
            if not len(pcm):
                return
        self.received += len(pcm)
        self.pieces.append(pcm)
        self.waiting += len(pcm)
        self.ready.set()

    def close(self) -> None:
        self.closed = True
        self.ready.set()

    async def take(self) -> np.ndarray | None:
        """The next audio to decode, or None once the stream has ended and all was taken."""
        while not self.pieces:
            if self.closed:
                return None
            self.ready.clear()
            await self.ready.wait()
        if self.waiting > CATCH_UP_SECONDS * STREAM_SAMPLE_RATE:
            pcm = np.concatenate(list(self.pieces))
            self.pieces.clear()
        else:
            pcm = self.pieces.popleft()
        self.waiting -= len(pcm)
        return pcm


async def read_stream(websocket: WebSocket, inbox: StreamInbox, idle_seconds: float, decoding: asyncio.Future) -> str:
    """Read the socket's messages into ``inbox`` until the stream ends: ``"end"`` (the client's ``{"type": "end"}``),
    ``"idle"`` (no message for ``idle_seconds``), ``"limit"`` (the audio reached the inbox's limit: what follows is
    not read) or ``"disconnect"``. A bad message is a ``RequestError``; a failure of ``decoding`` is raised here as
    soon as it happens."""
    while True:
        receiving = asyncio.ensure_future(websocket.receive())
        done, _ = await asyncio.wait({receiving, decoding}, timeout=idle_seconds,
                                     return_when=asyncio.FIRST_COMPLETED)
        if decoding in done:
            receiving.cancel()
            decoding.result()  # raises what failed; a decoding that ended early has nothing more to take
        if receiving not in done:
            receiving.cancel()
            return "idle"
        message = receiving.result()
        if message["type"] == "websocket.disconnect":
            return "disconnect"
        if message.get("bytes") is not None:
            data = message["bytes"]
            if len(data) % 2:
                raise RequestError(400, "audio: a binary message must hold whole 16-bit samples (PCM16 LE)")
            inbox.put(pcm16_samples(data))
            if inbox.cut:
                return "limit"
            continue
        check_end_message(message)
        return "end"


class TurnsSession:
    """One hands-free WebSocket (``/v1/stream?turns=true``): :class:`duet.serving.turns.TurnTaker` cuts the stream into turns
    and each turn is answered as soon as it ends, while the socket goes on listening.

    Messages out: ``speech_start`` and ``speech_end`` (turn, where in the stream, when decided), ``partial`` (turn,
    text), ``final`` (turn, transcript, response, latencies: ``after_end`` counts from the moment the VAD decided the
    turn had ended), ``error`` (turn, why: that turn failed, the session goes on) and, after ``{"type": "end"}``,
    ``done`` (turns answered, audio heard, VAD time) before the socket closes. Finals go out in turn order.

    With the offline model, a turn is transcribed and answered during the silence that ends it: once the turn's
    audio can no longer change unless the speaker goes on (the ``pause`` event, ``pad_s`` into the silence), the
    answer is computed; speech resuming cancels it, and the turn's end sends it (``"speculative": true``) instead
    of starting the work then. Partials re-decode the open turn every ``stream_interval`` seconds of new audio,
    one decode in flight at a time, none once a silence has begun (and one still waiting for the model is dropped
    when the answer starts: it would only delay it), none when every slot of the queue is taken (answers wait for
    one). With a cache-aware model (``streaming_model``), each turn streams through its own
    :class:`CacheAwareStream`, finished when the turn ends. A turn longer than ``max_audio_seconds`` ends there and
    the speech goes on as the next turn (``"forced_end": true``); the session itself has no length limit.
    """

    def __init__(self, websocket: WebSocket, pipeline: VoicePipeline, worker: InferenceWorker,
                 settings: ServerSettings, speak: bool, stream_note: str, streaming_model=None):
        self.websocket, self.pipeline, self.worker = websocket, pipeline, worker
        self.settings, self.speak, self.stream_note = settings, speak, stream_note
        self.streaming_model = streaming_model
        self.taker = TurnTaker(settings.vad_settings(), max_turn_s=settings.max_audio_seconds)
        self.interval = int(settings.stream_interval * STREAM_SAMPLE_RATE)
        self.send_lock = asyncio.Lock()
        self.tasks: set[asyncio.Task] = set()
        self.last_final: asyncio.Task | None = None
        self.speculation: tuple[int, tuple[int, int], asyncio.Task] | None = None
        self.answered = 0
        self.final_sent = 0  # the last turn whose final (or error) is going out
        self.partials: dict[int, int] = {}  # partials sent per turn
        self._new_turn()

    def _new_turn(self) -> None:
        self.pieces: list[np.ndarray] = []  # the open turn's audio so far (offline model: for its partials)
        self.turn_samples = 0
        self.partial_at = 0  # turn samples at the last partial decode
        self.partial_task: asyncio.Task | None = None
        self.turn_stream: CacheAwareStream | None = None

    def _spawn(self, coroutine) -> asyncio.Task:
        task = asyncio.ensure_future(coroutine)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    async def send(self, message: dict) -> None:
        async with self.send_lock:
            await self.websocket.send_json(message)

    async def on_worker(self, fn: Callable, *args):
        async with self.worker.slot(wait=True):
            return await self.worker.run(fn, *args)

    def transcribe(self, audio: np.ndarray) -> str:
        """A partial's text (no word confidences: they cost 4-11 % more CPU)."""
        return "" if len(audio) == 0 or is_silent(audio, self.pipeline.sample_rate) else \
            self.pipeline.transcribe(audio)[0]

    def answer(self, audio: np.ndarray) -> dict:
        """Transcript, its confidence and the answer of a turn's audio (on the inference thread)."""
        start = time.perf_counter()
        if len(audio) == 0 or is_silent(audio, self.pipeline.sample_rate):
            transcript, confidence = "", None
        else:
            timed, _ = self.pipeline.transcribe_timed(audio)
            transcript, confidence = timed.text, utterance_confidence(timed.words)
        return self._respond(transcript, confidence, time.perf_counter() - start)

    def finish_stream(self, stream: CacheAwareStream) -> dict:
        start = time.perf_counter()
        return self._respond(stream.finish(), None, time.perf_counter() - start)  # streaming: no word confidences

    def _respond(self, transcript: str, confidence: float | None, asr_s: float) -> dict:
        """The pipeline's answer to a transcript (duet.pipeline: a low-confidence one gets the apology, and the
        language model is not asked)."""
        start = time.perf_counter()
        response, understood, _ = self.pipeline.answer_transcript(transcript, confidence)
        return {"transcript": transcript, "response": response, "asr_s": asr_s, "confidence": confidence,
                "understood": understood, "slm_s": time.perf_counter() - start if understood else None}

    async def run(self) -> None:
        try:
            while True:
                try:
                    message = await asyncio.wait_for(self.websocket.receive(), self.settings.stream_idle_seconds)
                except asyncio.TimeoutError:  # a client silent this long: its turns are answered and it is closed
                    break
                if message["type"] == "websocket.disconnect":
                    return
                if message.get("bytes") is not None:
                    data = message["bytes"]
                    if len(data) % 2:
                        raise RequestError(400, "audio: a binary message must hold whole 16-bit samples (PCM16 LE)")
                    events = await asyncio.to_thread(self.taker.feed, pcm16_samples(data))
                    await self.handle(events, time.perf_counter())
                    continue
                check_end_message(message)
                break
            await self.handle(self.taker.finish(), time.perf_counter())
            if self.last_final is not None:
                await self.last_final
            detector = self.taker.detector
            await self.send({"type": "done", "turns": self.answered,
                             "audio_s": round(detector.samples / STREAM_SAMPLE_RATE, 3),
                             "vad_s": round(detector.windows_seconds, 4)})
            await self.websocket.close()
        except RequestError as e:
            await self.send({"type": "error", "error": str(e)})
            await self.websocket.close(code=1008)
        except WebSocketDisconnect:
            return
        except Exception as e:  # a model failure outside a turn's answer: the client hears why, the server goes on
            await self.send({"type": "error", "error": internal_error(e)})
            await self.websocket.close(code=1011)
        finally:
            for task in list(self.tasks):
                task.cancel()

    async def handle(self, events: list[TurnEvent], decided: float) -> None:
        """React to the events of one piece of audio; ``decided`` is when the VAD had decided them."""
        for event in events:
            if event.kind == "speech_start":
                self._new_turn()
                if self.streaming_model is not None:  # the session sets the model's streaming parameters: on its thread
                    self.turn_stream = await self.on_worker(CacheAwareStream, self.streaming_model)
                await self.send(vad_message("speech_start", event.turn, event.at_s, event.decided_s))
            elif event.kind == "audio":
                await self.on_audio(event)
            elif event.kind == "pause" and self.streaming_model is None:
                self.cancel_speculation()
                if self.partial_task is not None:  # a partial still waiting for the model would delay the answer
                    self.partial_task.cancel()
                self.speculation = (event.turn, event.bounds, self._spawn(self.on_worker(self.answer, event.audio)))
            elif event.kind == "resume":
                self.cancel_speculation()
            elif event.kind == "speech_end":
                await self.send(vad_message("speech_end", event.turn, event.at_s, event.decided_s))
                self.end_turn(event, decided)

    def cancel_speculation(self) -> None:
        if self.speculation is not None:
            self.speculation[2].cancel()
            self.speculation = None

    async def on_audio(self, event: TurnEvent) -> None:
        if self.turn_stream is not None:
            partial = await self.on_worker(self.turn_stream.feed, event.audio)
            if partial is not None:
                await self.send({"type": "partial", "turn": event.turn, "text": partial,
                                 "audio_s": round(self.turn_stream.samples / STREAM_SAMPLE_RATE, 3)})
            return
        self.pieces.append(event.audio)
        self.turn_samples += len(event.audio)
        due = self.turn_samples - self.partial_at >= self.interval
        idle = self.partial_task is None or self.partial_task.done()
        if due and idle and self.taker.detector.silence_samples == 0:  # none once a silence has begun
            audio = np.concatenate(self.pieces)
            self.pieces, self.partial_at = [audio], self.turn_samples
            self.partial_task = self._spawn(self.send_partial(event.turn, audio))

    async def send_partial(self, turn: int, audio: np.ndarray) -> None:
        try:
            async with self.worker.slot():  # a partial never waits for a slot: when the server is busy, none
                text = await self.worker.run(self.transcribe, audio)
        except RequestError:
            return
        if turn > self.final_sent:  # never after the turn's final
            self.partials[turn] = self.partials.get(turn, 0) + 1
            await self.send({"type": "partial", "turn": turn, "text": text,
                             "audio_s": round(len(audio) / STREAM_SAMPLE_RATE, 3)})

    def end_turn(self, event: TurnEvent, decided: float) -> None:
        speculative = False
        if self.turn_stream is not None:
            work = self._spawn(self.on_worker(self.finish_stream, self.turn_stream))
            report = self.turn_stream.report()
        else:
            if self.speculation is not None and self.speculation[:2] == (event.turn, event.bounds):
                work, speculative = self.speculation[2], True
                self.speculation = None
            else:
                self.cancel_speculation()
                work = self._spawn(self.on_worker(self.answer, event.audio))
            report = {"decoder": "re-decode", "interval_s": self.settings.stream_interval,
                      "audio_s": round(len(event.audio) / STREAM_SAMPLE_RATE, 3)}
        self.last_final = self._spawn(self.deliver(event, work, speculative, {**report, "how": self.stream_note},
                                                   self.last_final, decided))
        self._new_turn()

    async def deliver(self, event: TurnEvent, work: asyncio.Task, speculative: bool, stream: dict,
                      previous: asyncio.Task | None, decided: float) -> None:
        """Send turn ``event.turn``'s final once its answer is ready and the turn before it has been sent."""
        try:
            result = await work
        except asyncio.CancelledError:
            raise
        except Exception as e:  # a model failure: this turn's error, and the session goes on
            result = {"error": internal_error(e)}
        if previous is not None:
            await asyncio.wait([previous])
        if "error" in result:
            self.final_sent = event.turn
            await self.send({"type": "error", "turn": event.turn, "error": result["error"]})
            return
        transcript, response = result["transcript"], result["response"]
        self.final_sent = event.turn  # no partial of this turn from here on
        if stream["decoder"] == "re-decode":
            stream["partials"] = self.partials.pop(event.turn, 0)
        note = None if transcript else "no speech heard; language model skipped"
        if transcript and not result["understood"]:
            note = f"confidence {result['confidence']:.2f} is below {self.pipeline.settings.min_confidence:g}: not understood"
        final = {"type": "final", "turn": event.turn, "transcript": transcript, "response": response,
                 "confidence": result["confidence"], "understood": result["understood"], "note": note,
                 "speech_end_s": event.at_s, "forced_end": event.forced, "speculative": speculative,
                 "latency_s": {"asr_final": round(result["asr_s"], 4),
                               **({"slm": round(result["slm_s"], 4)} if result["slm_s"] is not None else {})},
                 "stream": stream}
        if self.speak and response:
            wav, error = await asyncio.to_thread(speak_wav_bytes, response)
            final["speech"], final["error"] = (speech_json(wav) if wav else None), error
        final["latency_s"]["after_end"] = round(time.perf_counter() - decided, 4)
        self.answered += 1
        await self.send(final)


# ------------------------------------------------------------------------------------------------ requests


class GenerationOptions(BaseModel):
    """Language-model decoding options of one request (``slm.generation.GenerationSettings`` fields)."""

    model_config = ConfigDict(extra="forbid")
    strategy: str | None = None
    max_new_tokens: int | None = None
    num_beams: int | None = None
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    repetition_penalty: float | None = None


class RespondRequest(GenerationOptions):
    text: str


def generation_for_request(base: GenerationSettings, options: dict) -> GenerationSettings:
    """``base`` with the options the request gave, validated; a bad one is a 400 naming its field."""
    given = {name: value for name, value in options.items() if value is not None}
    try:
        return dataclasses.replace(base, **given).validate()
    except GenerationSettingsError as e:
        # the settings name command-line flags (--top-p); a request names fields (top_p)
        raise RequestError(400, re.sub(r"--([a-z]+(?:-[a-z]+)*)", lambda m: m.group(1).replace("-", "_"), str(e)))


def pipeline_for_request(pipeline: VoicePipeline, options: dict) -> VoicePipeline:
    """``pipeline``'s models answering with the request's settings: its language-model ``options``
    (:func:`generation_for_request`) over the server's."""
    generation = generation_for_request(pipeline.settings.generation, options)
    return pipeline.with_settings(dataclasses.replace(pipeline.settings, generation=generation))


def speech_json(wav: bytes) -> dict:
    return {"format": "wav", "base64": base64.b64encode(wav).decode("ascii")}


def validation_message(error: RequestValidationError) -> str:
    parts = []
    for item in error.errors():
        where = ".".join(str(part) for part in item.get("loc", ())[1:]) or "request"
        parts.append(f"{where}: {item.get('msg', 'invalid')}")
    return "; ".join(parts)


TIMED_FORMATS = ("verbose_json", "srt", "vtt")  # the formats that carry word or cue times
CUE_WORDS = 12  # words in one subtitle cue at most: about two lines on a screen


def transcription_response(segments: list, response_format: str, duration: float):
    """OpenAI's answer in ``response_format``: ``json`` ``{"text"}``, ``text``, ``verbose_json`` (segments cut at
    pauses, words with their times and confidence), ``srt`` or ``vtt`` (cues of at most ``CUE_WORDS`` words, timed
    by their first and last word)."""
    text = " ".join(s.text for s in segments if s.text)
    if response_format == "text":
        return PlainTextResponse(text)
    if response_format == "json":
        return {"text": text}
    if response_format == "verbose_json":
        return {"task": "transcribe", "language": "en", "duration": round(duration, 3), "text": text,
                "segments": [{"id": i, "start": s.start, "end": s.end, "text": s.text} for i, s in enumerate(segments)],
                # OpenAI's word objects (word, start, end), plus duet.asr.words' confidence
                "words": [dataclasses.asdict(w) for s in segments for w in (s.words or [])]}
    cues = subtitle_cues(segments)
    if response_format == "srt":
        return PlainTextResponse("".join(f"{n}\n{cue_time(start, ',')} --> {cue_time(end, ',')}\n{line}\n\n"
                                         for n, (start, end, line) in enumerate(cues, 1)))
    return PlainTextResponse("WEBVTT\n\n" + "".join(f"{cue_time(start, '.')} --> {cue_time(end, '.')}\n{line}\n\n"
                                                    for start, end, line in cues), media_type="text/vtt")


def subtitle_cues(segments: list) -> list[tuple[float, float, str]]:
    """(start, end, text) of each cue: a segment's words in runs of ``CUE_WORDS``, or the segment itself when it has
    no word times."""
    cues = []
    for segment in segments:
        if not segment.text:
            continue
        words = segment.words or []
        if not words:
            cues.append((segment.start, segment.end, segment.text))
            continue
        for first in range(0, len(words), CUE_WORDS):
            run = words[first:first + CUE_WORDS]
            cues.append((run[0].start, max(run[-1].end, run[0].start), " ".join(w.word for w in run)))
    return cues


def cue_time(seconds: float, separator: str) -> str:
    """``hh:mm:ss,mmm`` (SubRip) or ``hh:mm:ss.mmm`` (WebVTT)."""
    millis = round(max(seconds, 0.0) * 1000)
    return f"{millis // 3600000:02d}:{millis // 60000 % 60:02d}:{millis // 1000 % 60:02d}{separator}{millis % 1000:03d}"


# ------------------------------------------------------------------------------------------------ the guard


class RequestGuard:
    """ASGI middleware in front of every route, HTTP and WebSocket alike, refusing before any route runs:

    - a ``Host`` that is neither an IP address, ``localhost`` nor one of ``allowed_hosts`` (400): a page on
      attacker.example whose name was re-pointed at this machine (DNS rebinding) sends its own name here;
    - an ``Origin`` other than the page's own (the scheme and the ``Host`` it was served from) or one of
      ``allowed_origins`` (403): another web page in the user's browser. Clients that are not browsers send none;
    - with an ``api_key``, a request without ``Authorization: Bearer <key>`` (401), except the page, its files
      and /health; a browser's WebSocket, which cannot send headers, offers the key as a subprotocol instead
      (:func:`presented_key`);
    - a body over the upload limit (413), counted as it streams in (a ``Content-Length`` over it is refused at
      once, a chunked body when it passes the limit): the route is told the client left, and nothing past the
      limit reaches the multipart parser, its temporary files or the disk.
    """

    PUBLIC = ("/", "/health")

    def __init__(self, app, settings: ServerSettings):
        self.app = app
        self.settings = settings
        self.body_limit = settings.max_upload_bytes + BODY_SLACK_BYTES

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        headers = Headers(scope=scope)
        refusal = self.refusal(scope, headers)
        if refusal is not None:
            status, message, extra = refusal
            if scope["type"] == "websocket":  # closed before the handshake completes: the client sees HTTP 403
                await receive()
                await send({"type": "websocket.close", "code": 1008, "reason": message[:120]})
                return
            return await error_response(status, message, extra)(scope, receive, send)
        if scope["type"] == "websocket":
            return await self.app(scope, receive, send)
        await self.limited(scope, receive, send)

    def refusal(self, scope, headers: Headers) -> tuple[int, str, dict | None] | None:
        settings = self.settings
        host = headers.get("host")
        if host is not None and not host_allowed(host, settings.allowed_hosts):
            return 400, (f"Host {host!r} is not served here (IP addresses, localhost and --allowed-host only: "
                         "a web page cannot reach this server under a name of its own)"), None
        origin = headers.get("origin")
        if origin is not None and origin not in settings.allowed_origins and not same_origin(origin, host, scope):
            return 403, f"Origin {origin!r} is not allowed (the page's own origin and --allowed-origin only)", None
        path = scope.get("path", "")
        if settings.api_key is not None and path not in self.PUBLIC and not path.startswith("/static/"):
            given = presented_key(scope, headers)
            if given is None or not hmac.compare_digest(given.encode(), settings.api_key.strip().encode()):
                return 401, "authorization: this server needs its API key (Authorization: Bearer <key>)", \
                    {"WWW-Authenticate": "Bearer"}
        length = headers.get("content-length")
        if length and length.isdigit() and int(length) > self.body_limit:
            return 413, too_large_message(self.settings, int(length)), None
        return None

    async def limited(self, scope, receive, send) -> None:
        received, refused, started = 0, False, False

        async def counted_receive():
            nonlocal received, refused
            if refused:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.body_limit:
                    refused = True
                    if not started:
                        await error_response(413, too_large_message(self.settings, received))(scope, receive, send)
                    return {"type": "http.disconnect"}  # the route stops reading: its parser never sees the rest
            return message

        async def guarded_send(message):
            nonlocal started
            if refused:  # the 413 went out: whatever the route answers to the cut body is dropped
                return
            started = True
            await send(message)

        await self.app(scope, counted_receive, guarded_send)


#: The WebSocket subprotocol the server agrees to when a client offers it: a browser that offers any subprotocol
#: (the key's, below) fails the handshake unless the server picks one of them, and it must not be the key's
STREAM_SUBPROTOCOL = "duet"
#: A browser's WebSocket cannot send an Authorization header: it offers ``duet.key.<key in base64url, unpadded>``
#: beside ``duet`` (a subprotocol is a token: base64url's characters are all allowed in one). The page does this.
KEY_SUBPROTOCOL_PREFIX = "duet.key."


def presented_key(scope, headers: Headers) -> str | None:
    """The API key a request presents: ``Authorization: Bearer <key>``, or on a WebSocket the key subprotocol."""
    scheme, _, given = headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer":
        return given.strip()
    if scope["type"] != "websocket":
        return None
    for protocol in scope.get("subprotocols", []):
        if protocol.startswith(KEY_SUBPROTOCOL_PREFIX):
            encoded = protocol[len(KEY_SUBPROTOCOL_PREFIX):]
            try:
                return base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode().strip()
            except ValueError:  # not base64 (binascii.Error), not UTF-8 (UnicodeDecodeError): no key given
                return None
    return None


def exposure_warning(settings: ServerSettings) -> str | None:
    """What ``tools/serve.py`` warns when the server listens beyond this machine without an API key, else None."""
    if settings.api_key is not None or settings.host == "localhost":
        return None
    with contextlib.suppress(ValueError):
        if ipaddress.ip_address(settings.host).is_loopback:
            return None
    return (f"warning: listening on {settings.host} without --api-key: anyone who can reach port {settings.port} "
            "can use the models; give --api-key-file (or --api-key)")


def too_large_message(settings: ServerSettings, size: int) -> str:
    return (f"request body of {size} bytes or more is larger than the upload limit of {settings.max_upload_mb:g} MiB")


def host_allowed(host: str, allowed: tuple[str, ...]) -> bool:
    """Whether a ``Host`` header names this server in a way no web page can re-point: an IP address, localhost,
    or a name the operator listed."""
    name = host[1:].partition("]")[0] if host.startswith("[") else host.rpartition(":")[0] if ":" in host else host
    name = name.lower().rstrip(".")
    if name == "localhost" or name in {a.lower() for a in allowed}:
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def same_origin(origin: str, host: str | None, scope) -> bool:
    """Whether ``origin`` is the page's own: the scheme this request came in on and the host it asked for."""
    secure = scope.get("scheme") in ("https", "wss")
    return host is not None and origin.lower() == f"{'https' if secure else 'http'}://{host}".lower()


# ------------------------------------------------------------------------------------------------ the app


def create_app(pipeline: VoicePipeline, settings: ServerSettings = ServerSettings(), asr_model: str = "asr",
               slm_model: str = "slm", streaming_model=None) -> FastAPI:
    """The FastAPI app serving ``pipeline``; ``asr_model``/``slm_model`` are the names /health reports.

    ``streaming_model``: a loaded cache-aware model (``settings.streaming_asr_model``) for the WebSocket's
    partials; without one the WebSocket re-decodes with the pipeline's offline model."""
    settings.validate()
    vad_settings = settings.vad_settings()
    worker = InferenceWorker(settings.queue_size)
    sample_rate = pipeline.sample_rate
    stream_note = stream_decoder_note(settings, streaming_model)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        worker.close()

    # no /docs or /redoc: FastAPI's pages load Swagger UI and ReDoc from a CDN; /openapi.json describes the API
    app = FastAPI(title="duet voice pipeline", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.worker = worker
    app.mount("/static", StaticFiles(directory=WEB_FOLDER), name="static")

    @app.exception_handler(RequestError)
    async def refused(request: Request, error: RequestError):
        return error_response(error.status, str(error), error.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, error: RequestValidationError):
        return error_response(400, validation_message(error))

    @app.exception_handler(ContextLengthError)
    async def too_long_for_the_model(request: Request, error: ContextLengthError):
        return error_response(400, f"text: {error}")

    @app.exception_handler(Exception)
    async def failed(request: Request, error: Exception):
        return error_response(500, internal_error(error))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, error: StarletteHTTPException):
        if is_disk_full(error.__cause__):  # FastAPI's "error parsing the body": the multipart spool found no space
            log.error("no space left for a request body in %s", tempfile.gettempdir())
            return error_response(507, "the server has no disk space left for the request; retry later")
        return error_response(error.status_code, str(error.detail))

    app.add_middleware(RequestGuard, settings=settings)

    @app.get("/", include_in_schema=False)
    async def page():
        return FileResponse(WEB_FOLDER / "index.html")

    @app.get("/health")
    async def health():
        return {"status": "ok", "asr_model": asr_model, "slm_model": slm_model,
                "asr_decoding": pipeline.describe_asr_decoding(), "generation": dataclasses.asdict(pipeline.settings.generation),
                "min_confidence": pipeline.settings.min_confidence, "stream_decoder": stream_note,
                "queue": worker.figures(),
                "turns": {"default": settings.turns, "turn_silence_s": settings.turn_silence,
                          "vad_threshold": settings.vad_threshold},
                "limits": {"max_audio_seconds": settings.max_audio_seconds, "max_upload_mb": settings.max_upload_mb,
                           "max_sample_rate": settings.max_sample_rate, "max_channels": settings.max_channels,
                           "max_decoded_samples": settings.max_decoded_samples,
                           "max_text_chars": settings.max_text_chars,
                           "stream_idle_seconds": settings.stream_idle_seconds},
                "api_key": settings.api_key is not None}

    def transcribe_segments(audio: np.ndarray, words: bool) -> list:
        return [] if is_silent(audio, sample_rate) else pipeline.transcribe_segments(audio, words=words)

    @app.post("/v1/audio/transcriptions")
    async def transcriptions(file: Annotated[UploadFile, File()], model: Annotated[str | None, Form()] = None,
                             response_format: Annotated[str, Form()] = "json"):
        """OpenAI-compatible; ``model`` is accepted and ignored (the server has one ASR model)."""
        if response_format not in RESPONSE_FORMATS:
            raise RequestError(400, f"response_format: must be one of {', '.join(RESPONSE_FORMATS)}, "
                                    f"got {response_format!r}")
        async with worker.slot():
            audio = await read_upload(file, settings, sample_rate)
            # word times only where the answer carries them: they cost 4-11 % more CPU
            segments = await worker.run(transcribe_segments, audio, response_format in TIMED_FORMATS)
        return transcription_response(segments, response_format, len(audio) / sample_rate)

    @app.post("/v1/pipeline")
    async def run_pipeline(file: Annotated[UploadFile, File()], speak: Annotated[bool, Form()] = False,
                           strategy: Annotated[str | None, Form()] = None,
                           max_new_tokens: Annotated[int | None, Form()] = None,
                           num_beams: Annotated[int | None, Form()] = None,
                           temperature: Annotated[float | None, Form()] = None,
                           top_k: Annotated[int | None, Form()] = None,
                           top_p: Annotated[float | None, Form()] = None,
                           repetition_penalty: Annotated[float | None, Form()] = None):
        start = time.perf_counter()
        options = {"strategy": strategy, "max_new_tokens": max_new_tokens, "num_beams": num_beams,
                   "temperature": temperature, "top_k": top_k, "top_p": top_p,
                   "repetition_penalty": repetition_penalty}
        request_pipeline = pipeline_for_request(pipeline, options)
        if speak and shutil.which(SPEAK_ENGINE) is None:
            raise RequestError(501, f"speak: the server cannot speak ({SPEAK_ENGINE} is not installed)")
        async with worker.slot():
            audio = await read_upload(file, settings, sample_rate)
            result = PipelineResult(file=file.filename or "upload")
            result.latency_s["audio_load"] = time.perf_counter() - start
            queued = time.perf_counter()

            def answer() -> PipelineResult:
                result.latency_s["queue_wait"] = time.perf_counter() - queued
                return request_pipeline.run_audio(audio, result, start)
            result = await worker.run(answer)
        body = result.to_json()
        if speak and result.response:
            wav, error = await asyncio.to_thread(speak_wav_bytes, result.response)
            body["speech"] = speech_json(wav) if wav else None
            body["error"] = error
        body["latency_s"]["total"] = round(time.perf_counter() - start, 4)
        return body

    @app.post("/v1/respond")
    async def respond(request: RespondRequest):
        if not request.text.strip():
            raise RequestError(400, "text: empty; give the instruction to answer")
        if len(request.text) > settings.max_text_chars:
            raise RequestError(400, f"text: {len(request.text)} characters, more than the limit of "
                                    f"{settings.max_text_chars}")
        options = request.model_dump(exclude={"text"})
        request_pipeline = pipeline_for_request(pipeline, options)
        start = time.perf_counter()
        async with worker.slot():
            answer = await worker.run(request_pipeline.respond_with_calls, request.text.strip())
        # the tool calls executed into the answer (tool, input, result, error), as /v1/pipeline's result gives them
        return {"response": answer.text, "tool_calls": [call.as_dict() for call in answer.calls],
                "latency_s": {"slm": round(time.perf_counter() - start, 4)}}

    @app.websocket("/v1/stream")
    async def stream(websocket: WebSocket, speak: bool = False, turns: bool | None = None):
        offered = websocket.scope.get("subprotocols", [])
        await websocket.accept(subprotocol=STREAM_SUBPROTOCOL if STREAM_SUBPROTOCOL in offered else None)
        if settings.turns if turns is None else turns:
            await TurnsSession(websocket, pipeline, worker, settings, speak, stream_note, streaming_model).run()
            return
        detector = SpeechDetector(vad_settings)  # speech_start / speech_end messages
        said = 0  # speech starts heard
        if streaming_model is not None:
            async with worker.slot(wait=True):  # the session sets the model's streaming parameters: on its thread
                decoder = await worker.run(CacheAwareStream, streaming_model)
        else:
            decoder = RedecodeStream(lambda audio: pipeline.transcribe(audio)[0], sample_rate,
                                     settings.stream_interval,
                                     transcribe_final=lambda audio: pipeline.transcribe_timed(audio)[0])
        inbox = StreamInbox(int(settings.max_audio_seconds * STREAM_SAMPLE_RATE))

        async def decode_as_audio_arrives() -> None:
            """The VAD and the decoder take the audio as it comes, one piece (or, behind by more than
            ``CATCH_UP_SECONDS``, all that waits, as one) at a time, while the socket goes on reading."""
            nonlocal said
            while (pcm := await inbox.take()) is not None:
                for event in await asyncio.to_thread(detector.feed, pcm):
                    said += event.kind == "speech_start"
                    await websocket.send_json(vad_event_message(event, said))
                async with worker.slot(wait=True):
                    partial = await worker.run(decoder.feed, pcm)
                if partial is not None:
                    await websocket.send_json({"type": "partial", "text": partial,
                                               "audio_s": round(decoder.samples / STREAM_SAMPLE_RATE, 3)})

        decoding = asyncio.ensure_future(decode_as_audio_arrives())
        try:
            ended_by = await read_stream(websocket, inbox, settings.stream_idle_seconds, decoding)
            if ended_by == "disconnect":
                return
            inbox.close()
            await decoding
            ended = time.perf_counter()
            for event in detector.flush():
                await websocket.send_json(vad_event_message(event, said))
            async with worker.slot(wait=True):
                transcript = await worker.run(decoder.finish)
                asr_s = time.perf_counter() - ended
                response, understood, note = await worker.run(pipeline.answer_transcript, transcript,
                                                              decoder.confidence)
            note = note or (None if transcript else "no speech heard; language model skipped")
            final = {"type": "final", "transcript": transcript, "response": response, "note": note,
                     "confidence": decoder.confidence, "understood": understood,
                     "latency_s": {"asr_final": round(asr_s, 4),
                                   **({"slm": round(time.perf_counter() - ended - asr_s, 4)} if understood else {})},
                     "stream": {**decoder.report(), "how": stream_note}}
            if ended_by == "idle":
                final["ended_by"] = f"idle: no message for {settings.stream_idle_seconds:g} s"
            elif ended_by == "limit":
                final["ended_by"] = (f"limit: the stream is longer than the limit of {settings.max_audio_seconds:g} s; "
                                     "the transcript covers that much, the audio after it was not read")
            if speak and response:
                wav, error = await asyncio.to_thread(speak_wav_bytes, response)
                final["speech"], final["error"] = (speech_json(wav) if wav else None), error
            final["latency_s"]["after_end"] = round(time.perf_counter() - ended, 4)
            await websocket.send_json(final)
            # 1009 (too big): a client still sending learns why the socket closed under it
            await websocket.close(**({"code": 1009, "reason": "stream longer than the limit"}
                                     if ended_by == "limit" else {}))
        except (RequestError, ContextLengthError) as e:
            await websocket.send_json({"type": "error", "error": str(e)})
            await websocket.close(code=1009 if getattr(e, "status", None) == 413 else 1008)
        except WebSocketDisconnect:
            return
        except Exception as e:  # a model or decoding failure: the client hears why, the server keeps serving
            await websocket.send_json({"type": "error", "error": internal_error(e)})
            await websocket.close(code=1011)
        finally:
            decoding.cancel()

    return app
