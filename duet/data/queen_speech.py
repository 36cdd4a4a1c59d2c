"""The voice lines of *Flight of the Amazon Queen* (Debian main: ``flight-of-the-amazon-queen``) as audio files.

The game's CD edition holds ~4.6 h of voice-acted English dialogue by many actors; ScummVM's compressed build,
which Debian ships, keeps it as one MP3 stream (11,025 Hz, mono) per line inside ``queen.1c``. That container
starts with a table: ``QTBL``, a 6-byte version, 3 bytes, the entry count (u16, big-endian) at byte 13, then
21-byte entries: the name (12 bytes, NUL-padded), the bundle (1 byte), the offset and the size (u32 big-endian
each) of the entry's bytes in the same file. Voice lines are the ``*.SB`` entries. There are no transcripts:
label them with ``tools/pseudo_label.py``. Writing them: ``duet.data.game_speech``.

The game's content and its licence: docs/data.md, "Credits and licences of the data".
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from duet.errors import DuetError
from duet.data.game_speech import ExtractReport, VoiceLine, write_lines
from duet.io import read_mono

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
    """One voice line as mono float32 at ``sample_rate``; one libsndfile cannot decode is a ``DuetError``
    "<entry>: <reason>"."""
    try:
        return read_mono(io.BytesIO(data[entry.offset:entry.offset + entry.size]), sample_rate)
    except RuntimeError as e:  # sf.LibsndfileError is one
        raise DuetError(f"{entry.name}: {e}") from None


def voice_line(data: bytes, entry: Entry) -> VoiceLine:
    """``entry`` as a line to write: its scene is its name's first two characters (the game's room)."""
    stem = entry.name.rsplit(".", 1)[0]
    return VoiceLine(stem, stem[:2], entry.name, lambda sample_rate: decode_line(data, entry, sample_rate))


def extract(container: Path, out_dir: Path, sample_rate: int = 16000, join_seconds: float = 0.0,
            progress: Callable[[int, int], None] | None = None) -> ExtractReport:
    """Write the voice lines of ``container`` as FLAC files under ``out_dir`` (``duet.data.game_speech.write_lines``:
    ``<scene>/<first line>[+N].flac``)."""
    try:
        data = container.read_bytes()
    except OSError as e:
        raise DuetError(f"cannot read {container}: {e.strerror or e}") from None
    lines = voice_lines(read_table(data, str(container)))
    if not lines:
        raise DuetError(f"{container}: holds no voice lines (*{_VOICE_SUFFIX} entries)")
    try:
        named = [voice_line(data, e) for e in lines]
    except DuetError as e:  # a name that cannot be a file name: a corrupt table
        raise DuetError(f"{container}: {e}") from None
    return write_lines(named, out_dir, "flight-of-the-amazon-queen", sample_rate, join_seconds, progress)
