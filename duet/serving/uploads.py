"""An uploaded recording's audio, within the server's limits: written to a temporary file (at most
``max_upload_mb``), read by libsndfile (WAV, FLAC, OGG, MP3; up to ``max_sample_rate`` and ``max_channels``,
averaged to mono and resampled to the model's 16 kHz as it is read, its samples counted from the header before any
decoding and again while reading); what libsndfile cannot read (WebM/Opus from a browser's MediaRecorder, MP4/AAC)
is decoded by ffmpeg allowed audio containers only (:func:`decode_with_ffmpeg`), so an upload never makes the server
read another file. Every refusal is a ``RequestError`` naming the field, never a server path."""

from __future__ import annotations

import asyncio
import logging
import math
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr
from fastapi import UploadFile

from duet.foundation.errors import first_line, is_disk_full
from duet.io import truncation_problem
from duet.serving.errors import RequestError, without_paths
from duet.serving.settings import ServerSettings

log = logging.getLogger(__name__)

FFMPEG = "ffmpeg"
# the demuxers ffmpeg may use for an upload: audio containers only. Playlists (HLS), concat lists and the other
# demuxers that open further files or URLs are not among them, so an upload can never make the server read a file
FFMPEG_DEMUXERS = ("matroska,webm", "ogg", "mp3", "mov,mp4,m4a,3gp,3g2,mj2", "aac", "wav", "flac", "aiff", "caf")
FFMPEG_SECONDS = 120  # an ffmpeg decode taking longer than this is refused (a decode of 10 min of Opus takes ~2 s)
AUDIO_CONTAINERS = ("WAV", "FLAC", "OGG/Opus", "MP3", "WebM", "MP4/M4A", "AAC", "AIFF", "CAF")


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
    rate; a 413 as soon as the samples pass the limits, whatever the header said.

    Every block is read into one buffer and every resampled piece written into one array sized from the header: a
    list of pieces and their concatenation took 74 MiB at the peak for 600 s of 48 kHz stereo (37 MiB of result),
    and left 37 MiB in the decoding thread's heap after each request; now 39 and none."""
    limit = min(settings.max_audio_seconds * rate, settings.max_decoded_samples / channels)
    resampler = None if rate == sample_rate else soxr.ResampleStream(rate, sample_rate, 1, dtype="float32",
                                                                      quality="HQ")
    frames = 0
    try:
        with sf.SoundFile(str(path)) as audio_file:
            out = MonoOut(math.ceil(min(audio_file.frames, limit) * sample_rate / rate))
            for block in audio_file.blocks(out=np.empty((1 << 16, channels), dtype=np.float32)):
                frames += len(block)
                if frames > limit:
                    raise too_long(settings, field)
                mono = block.mean(axis=1)
                out.put(mono if resampler is None else resampler.resample_chunk(mono))
    except (sf.LibsndfileError, RuntimeError, OSError) as e:
        reason = without_paths(first_line(e), path)
        raise RequestError(400, f"{field}: cannot decode the audio (corrupt or truncated: {reason})") from None
    if resampler is None:
        return out.samples()
    out.put(resampler.resample_chunk(np.zeros(0, dtype=np.float32), last=True))
    return out.samples(math.ceil(frames * sample_rate / rate))  # librosa.resample's length: ceil(frames x the ratio)


class MonoOut:
    """Samples written piece by piece into one array of the expected length (grown when more come)."""

    def __init__(self, expected: int):
        self.array, self.filled = np.empty(max(expected, 1), dtype=np.float32), 0

    def put(self, piece: np.ndarray) -> None:
        end = self.filled + len(piece)
        if end > len(self.array):  # the resampler's last few samples, or a header that undercounts
            self.array = np.concatenate([self.array[:self.filled], np.empty(max(end - self.filled, len(self.array)
                                                                                // 4), dtype=np.float32)])
        self.array[self.filled:end] = piece
        self.filled = end

    def samples(self, size: int | None = None) -> np.ndarray:
        """The samples written, or exactly ``size`` of them: cut, or padded with zeros. (``librosa.util.fix_length``
        does the same, but the first import of ``librosa.util``'s functions compiles numba code: +43 MiB that the
        server would hold from its first resampled upload on.)"""
        if size is not None and size > self.filled:
            self.put(np.zeros(size - self.filled, dtype=np.float32))
        return self.array[:self.filled if size is None else size]


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


