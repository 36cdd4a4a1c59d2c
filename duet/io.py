"""Audio files on disk: the expansion of audio folders into files, the check that an audio file can be read, reading
one as mono samples at a rate, and paths as a user would type them. (The file helpers every tool shares are ``duet.foundation.files``.)"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterable

import librosa
import numpy as np
import soundfile as sf

from duet.errors import AsrInputError

#: File endings a folder is searched for (any case): the common ones libsndfile (``duet.asr.inference.load_audio``)
#: reads. MP4/M4A, WebM and WMA are not among them: libsndfile has no decoder for those containers.
AUDIO_EXTENSIONS = frozenset({".flac", ".wav", ".mp3", ".ogg", ".oga", ".opus", ".aiff", ".aif", ".aifc", ".au",
                              ".snd", ".caf", ".w64", ".rf64"})


def expand_audio_paths(paths: Iterable[str | Path]) -> list[Path]:
    """``paths`` with each folder replaced by the audio files under it (recursively, sorted by path, hidden
    files and folders skipped); files, and paths that do not exist, stay as given, in their place.

    A folder holding no audio file is an ``AsrInputError`` naming it.
    """
    expanded: list[Path] = []
    for path in map(Path, paths):
        if not path.is_dir():
            expanded.append(path)
            continue
        found = sorted(p for p in path.rglob("*") if p.suffix.lower() in AUDIO_EXTENSIONS and p.is_file()
                       and not any(part.startswith(".") for part in p.relative_to(path).parts))
        if not found:
            raise AsrInputError(f"no audio files in folder {path} (looked for {', '.join(sorted(AUDIO_EXTENSIONS))})")
        expanded += found
    return expanded


def shown_path(path: str | os.PathLike) -> str:
    """``path`` as a user would type it here: relative to the working directory when inside it."""
    absolute = Path(path).resolve()
    try:
        return str(absolute.relative_to(Path.cwd()))
    except ValueError:
        return str(absolute)


def audio_file_problem(path: str | Path) -> str | None:
    """Why ``path`` cannot be read as audio ("no such file: …", "empty file: …", "cannot read audio …: …"), or
    None. Reads the header only (milliseconds), so that a tool can name every bad input before any model loads."""
    path = Path(path)
    if not path.is_file():
        return f"no such file: {path}"
    try:
        if path.stat().st_size == 0:
            return f"empty file: {path}"
        with open(path, "rb"):
            pass
        info = sf.info(str(path))
    except PermissionError as e:
        return f"cannot read {path}: {e.strerror}"
    except (sf.LibsndfileError, RuntimeError, OSError) as e:
        return f"cannot read audio {path}: {e}"
    problem = truncation_problem(info)
    return f"cannot read audio {path}: {problem}" if problem else None


#: What libsndfile's header log says when a WAV's ``data`` or an AIFF's ``SSND`` chunk claims more bytes than the
#: file holds: ``data : 128000 (should be 63978)``.
_SHORT_CHUNK = re.compile(r"^\s*(?:data|SSND)\s*:\s*(\d+)\s*\(should be (\d+)\)", re.MULTILINE)
#: Sizes a writer that cannot seek back (a pipe, a live recorder) leaves in the header: not a cut file.
_UNKNOWN_SIZES = (0, 0xFFFFFFFF, 0xFFFFFFFF - 1)


def truncation_problem(info) -> str | None:
    """Why the header of a file (``soundfile.info``) shows it cut short, or None. No path in the message: the
    caller names the item. A FLAC, MP3 or OGG cut short fails in libsndfile's decoder instead (``flac decoder
    lost sync``); a WAV or AIFF is read up to where it stops, silently, so its header's sample-data size is
    compared with what the file holds (libsndfile's own header log)."""
    for claimed, held in _SHORT_CHUNK.findall(info.extra_info or ""):
        claimed, held = int(claimed), int(held)
        if claimed > held and claimed not in _UNKNOWN_SIZES:
            return f"truncated: the header promises {claimed} bytes of samples, the file holds {held}"
    return None


@dataclass(frozen=True)
class RawPcm:
    """How to read headerless samples: libsndfile's RAW format needs the rate, channels and sample type given."""

    sample_rate: int
    subtype: str  # libsndfile's name, e.g. "PCM_U8", "PCM_16"
    channels: int = 1


def read_mono(source: str | BinaryIO, sample_rate: int, raw: RawPcm | None = None) -> np.ndarray:
    """The audio of a file path or an open binary file as mono float32 at ``sample_rate`` (channels averaged,
    resampled with librosa when the rate differs); ``raw`` reads headerless samples of that kind. What libsndfile
    cannot read raises its own error (``sf.LibsndfileError``, a ``RuntimeError``, or ``OSError``): the caller
    names the item."""
    header = {} if raw is None else {"format": "RAW", "samplerate": raw.sample_rate, "subtype": raw.subtype,
                                     "channels": raw.channels}
    audio, rate = sf.read(source, dtype="float32", always_2d=True, **header)
    audio = audio.mean(axis=1)
    return audio if rate == sample_rate else librosa.resample(audio, orig_sr=rate, target_sr=sample_rate)
