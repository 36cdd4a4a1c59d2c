"""The voice lines of *Flight of the Amazon Queen* (Debian main: ``flight-of-the-amazon-queen``) as audio files.

The game's CD edition holds ~4.6 h of voice-acted English dialogue by many actors; ScummVM's compressed build,
which Debian ships, keeps it as one MP3 stream (11,025 Hz, mono) per line inside ``queen.1c``. That container
starts with a table: ``QTBL``, a 6-byte version, 3 bytes, the entry count (u16, big-endian) at byte 13, then
21-byte entries: the name (12 bytes, NUL-padded), the bundle (1 byte), the offset and the size (u32 big-endian
each) of the entry's bytes in the same file. Voice lines are the ``*.SB`` entries. There are no transcripts:
label them with ``tools/pseudo_label.py``.

Game content (C) 1995 John Passfield and Steven Stamatiadis, under the Flight of the Amazon Queen licence
(redistribution free of charge, modification with a notice; ``/usr/share/doc/flight-of-the-amazon-queen/copyright``).
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import librosa
import numpy as np
import soundfile as sf

from duet.errors import DuetError
from duet.foundation.files import atomic_path

#: Where the Debian package installs the container.
DEBIAN_CONTAINER = Path("/usr/share/scummvm/flight-of-the-amazon-queen/queen.1c")

_MAGIC = b"QTBL"
_COUNT_AT = 13
_ENTRY = struct.Struct(">12sBII")  # name, bundle, offset, size
_VOICE_SUFFIX = ".SB"


@dataclass(frozen=True)
class Entry:
    """One file inside the container."""

    name: str
    offset: int
    size: int


def read_table(data: bytes, source: str = "queen.1c") -> list[Entry]:
    """The entries of a container's table; a file that is not one (or is cut short) is a ``DuetError``."""
    if data[:4] != _MAGIC or len(data) < _COUNT_AT + 2:
        raise DuetError(f"{source}: not a Flight of the Amazon Queen data file (no {_MAGIC.decode()} table)")
    (count,) = struct.unpack_from(">H", data, _COUNT_AT)
    start = _COUNT_AT + 2
    if len(data) < start + count * _ENTRY.size:
        raise DuetError(f"{source}: its table of {count} entries is cut short")
    entries = []
    for i in range(count):
        name, _bundle, offset, size = _ENTRY.unpack_from(data, start + i * _ENTRY.size)
        entry = Entry(name.rstrip(b"\0").decode("ascii", "replace"), offset, size)
        if offset + size > len(data):
            raise DuetError(f"{source}: entry {entry.name} runs past the end of the file")
        entries.append(entry)
    return entries


def voice_lines(entries: list[Entry]) -> list[Entry]:
    """The spoken lines among ``entries``."""
    return [e for e in entries if e.name.upper().endswith(_VOICE_SUFFIX)]


def decode_line(data: bytes, entry: Entry, sample_rate: int) -> np.ndarray:
    """One voice line as mono float32 at ``sample_rate``."""
    try:
        audio, rate = sf.read(io.BytesIO(data[entry.offset:entry.offset + entry.size]), dtype="float32",
                              always_2d=True)
    except (sf.LibsndfileError, RuntimeError) as e:
        raise DuetError(f"queen.1c: cannot decode {entry.name}: {e}") from None
    audio = audio.mean(axis=1)
    return audio if rate == sample_rate else librosa.resample(audio, orig_sr=rate, target_sr=sample_rate)


#: Silence between joined lines, seconds.
JOIN_GAP = 0.3


def _stem(entry: Entry) -> str:
    return entry.name.rsplit(".", 1)[0]


def line_path(out_dir: Path, first: Entry, joined: int = 1) -> Path:
    """Where a file is written: a folder per scene (the first line's first two characters), named by its first line
    (``+N`` when N more lines follow it in the file)."""
    stem = _stem(first)
    return out_dir / stem[:2] / (f"{stem}.flac" if joined == 1 else f"{stem}+{joined - 1}.flac")


def extract(container: Path, out_dir: Path, sample_rate: int = 16000, join_seconds: float = 0.0,
            progress: Callable[[int, int], None] | None = None) -> tuple[int, int, float, list[str]]:
    """Write the voice lines of ``container`` as 16-bit FLAC files under ``out_dir`` (see :func:`line_path`).

    ``join_seconds`` > 0: consecutive lines of one scene (the game's order: a conversation's turns) go into one
    file, ``JOIN_GAP`` of silence apart, while it stays within that length -- a teacher that reads a fixed 30 s
    window (Whisper) then labels several lines per pass instead of one. Files already there are kept (an
    interrupted run goes on); each file appears whole or not at all. Returns (files, lines in them, seconds of
    audio in them, names of lines that could not be decoded)."""
    try:
        data = container.read_bytes()
    except OSError as e:
        raise DuetError(f"cannot read {container}: {e.strerror or e}") from None
    lines = voice_lines(read_table(data, str(container)))
    if not lines:
        raise DuetError(f"{container}: holds no voice lines (*{_VOICE_SUFFIX} entries)")
    gap = np.zeros(int(JOIN_GAP * sample_rate), dtype=np.float32)
    files, written_lines, seconds, failed = 0, 0, 0.0, []
    group: list[tuple[Entry, np.ndarray]] = []

    def flush() -> None:
        nonlocal files, written_lines, seconds
        if not group:
            return
        path = line_path(out_dir, group[0][0], len(group))
        audio = np.concatenate([part for i, (_, a) in enumerate(group) for part in ((gap, a) if i else (a,))])
        if not path.exists():
            with atomic_path(path) as tmp:
                sf.write(str(tmp), audio, sample_rate, format="FLAC", subtype="PCM_16")
        files, written_lines, seconds = files + 1, written_lines + len(group), seconds + len(audio) / sample_rate
        group.clear()

    def length(parts: list[tuple[Entry, np.ndarray]]) -> float:
        return (sum(len(a) for _, a in parts) + len(gap) * (len(parts) - 1)) / sample_rate

    for i, entry in enumerate(lines, 1):
        try:
            audio = decode_line(data, entry, sample_rate)
        except DuetError:
            failed.append(entry.name)
            continue
        if group and (_stem(group[0][0])[:2] != _stem(entry)[:2]
                      or length(group + [(entry, audio)]) > max(join_seconds, 0.0)):
            flush()
        group.append((entry, audio))
        if progress:
            progress(i, len(lines))
    flush()
    return files, written_lines, seconds, failed
