"""The voice lines of *Flight of the Amazon Queen* (Debian main: ``flight-of-the-amazon-queen``) as audio files.

The game's CD edition holds ~4.6 h of voice-acted English dialogue by many actors; ScummVM's compressed build,
which Debian ships, keeps it as one MP3 stream (11,025 Hz, mono) per line inside ``queen.1c``. That container
starts with a table: ``QTBL``, a 6-byte version, 3 bytes, the entry count (u16, big-endian) at byte 13, then
21-byte entries: the name (12 bytes, NUL-padded), the bundle (1 byte), the offset and the size (u32 big-endian
each) of the entry's bytes in the same file. Voice lines are the ``*.SB`` entries. There are no transcripts:
label them with ``tools/pseudo_label.py``.

The game's content and its licence: README.md, "Credits and licences of the data".
"""

from __future__ import annotations

import io
import json
import re
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import soundfile as sf

from duet.errors import DuetError
from duet.foundation.files import atomic_path, write_text_atomic
from duet.io import read_mono

#: Where the Debian package installs the container.
DEBIAN_CONTAINER = Path("/usr/share/scummvm/flight-of-the-amazon-queen/queen.1c")

_MAGIC = b"QTBL"
_COUNT_AT = 13
_ENTRY = struct.Struct(">12sBII")  # name, bundle, offset, size
_VOICE_SUFFIX = ".SB"
# A voice line's name: it becomes a file name under the output folder, so nothing else is accepted.
_VOICE_NAME = re.compile(r"[A-Z0-9_]{1,8}\.SB")
#: Silence between joined lines, seconds: a pause like a turn change in the game's own dialogue, long enough that a
#: word never runs into the next line's, short enough to waste little of the teacher's window.
JOIN_GAP = 0.3
#: The longest joined file, seconds: under the 30 s that Whisper (the teacher, and the encoder of the base trained
#: on the labels) reads at once, so no joined file is cut.
MAX_JOIN_SECONDS = 29.0
# Written into the output folder: the settings its files were made with (a different join would mix two cuttings
# of the same lines in one folder, and a teacher reading it would label each line twice).
_SETTINGS_FILE = "extract_settings.json"


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
        if entry.name.upper().endswith(_VOICE_SUFFIX) and not _VOICE_NAME.fullmatch(entry.name):
            raise DuetError(f"{source}: voice line name {entry.name!r} is not a game file name (corrupt table?)")
        entries.append(entry)
    return entries


def voice_lines(entries: list[Entry]) -> list[Entry]:
    """The spoken lines among ``entries``."""
    return [e for e in entries if e.name.upper().endswith(_VOICE_SUFFIX)]


def decode_line(data: bytes, entry: Entry, sample_rate: int) -> np.ndarray:
    """One voice line as mono float32 at ``sample_rate``; one libsndfile cannot decode is a ``DuetError`` with its
    reason."""
    try:
        audio = read_mono(io.BytesIO(data[entry.offset:entry.offset + entry.size]), sample_rate)
    except RuntimeError as e:  # sf.LibsndfileError is one
        raise DuetError(f"cannot decode {entry.name}: {e}") from None
    if not len(audio):
        raise DuetError(f"cannot decode {entry.name}: no audio in it")
    return audio


def _stem(entry: Entry) -> str:
    return entry.name.rsplit(".", 1)[0]


def line_path(out_dir: Path, first: Entry, joined: int = 1) -> Path:
    """Where a file is written: a folder per scene (the first line's first two characters), named by its first line
    (``+N`` when N more lines follow it in the file)."""
    stem = _stem(first)
    return out_dir / stem[:2] / (f"{stem}.flac" if joined == 1 else f"{stem}+{joined - 1}.flac")


def _prepare_out_dir(out_dir: Path, settings: dict) -> None:
    """Create ``out_dir`` (or accept it as made by the same settings); anything else is a ``DuetError`` naming it."""
    if out_dir.exists() and not out_dir.is_dir():
        raise DuetError(f"output folder {out_dir}: exists and is not a folder")
    settings_path = out_dir / _SETTINGS_FILE
    if settings_path.is_file():
        try:
            earlier = json.loads(settings_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            earlier = None
        if earlier != settings:
            raise DuetError(f"output folder {out_dir}: holds files made with other settings ({settings_path}: "
                            f"{earlier}, now {settings}); give another folder or empty this one")
        return
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        write_text_atomic(settings_path, json.dumps(settings) + "\n")
    except OSError as e:
        raise DuetError(f"output folder {out_dir}: cannot write there ({e.strerror or e})") from None


def extract(container: Path, out_dir: Path, sample_rate: int = 16000, join_seconds: float = 0.0,
            progress: Callable[[int, int], None] | None = None) -> tuple[int, int, float, list[str]]:
    """Write the voice lines of ``container`` as 16-bit FLAC files under ``out_dir`` (see :func:`line_path`).

    ``join_seconds`` > 0 (at most ``MAX_JOIN_SECONDS``): consecutive lines of one scene (the game's order: a
    conversation's turns) go into one file, ``JOIN_GAP`` of silence apart, while it stays within that length -- a
    teacher that reads a fixed 30 s window (Whisper) then labels several lines per pass instead of one. Files already
    there are kept (an interrupted run goes on; ``out_dir`` remembers the settings and refuses others); each file
    appears whole or not at all. Returns (files, lines in them, seconds of speech in them -- the gaps not counted --,
    "<line>: <reason>" for each line that could not be decoded)."""
    if not 0 <= join_seconds <= MAX_JOIN_SECONDS:
        raise DuetError(f"--join-seconds must lie in [0, {MAX_JOIN_SECONDS:g}] (Whisper reads 30 s at once), "
                        f"not {join_seconds:g}")
    try:
        data = container.read_bytes()
    except OSError as e:
        raise DuetError(f"cannot read {container}: {e.strerror or e}") from None
    lines = voice_lines(read_table(data, str(container)))
    if not lines:
        raise DuetError(f"{container}: holds no voice lines (*{_VOICE_SUFFIX} entries)")
    _prepare_out_dir(out_dir, {"sample_rate": sample_rate, "join_seconds": join_seconds, "join_gap": JOIN_GAP})
    gap = np.zeros(int(JOIN_GAP * sample_rate), dtype=np.float32)
    files, written_lines, speech_samples, failed = 0, 0, 0, []
    group: list[tuple[Entry, np.ndarray]] = []

    def flush() -> None:
        nonlocal files, written_lines, speech_samples
        if not group:
            return
        path = line_path(out_dir, group[0][0], len(group))
        if not path.exists():
            audio = np.concatenate([part for i, (_, a) in enumerate(group) for part in ((gap, a) if i else (a,))])
            try:
                with atomic_path(path) as tmp:
                    sf.write(str(tmp), audio, sample_rate, format="FLAC", subtype="PCM_16")
            except OSError as e:
                raise DuetError(f"cannot write {path}: {e.strerror or e}") from None
        files, written_lines = files + 1, written_lines + len(group)
        speech_samples += sum(len(a) for _, a in group)
        group.clear()

    def length(parts: list[tuple[Entry, np.ndarray]]) -> float:
        return (sum(len(a) for _, a in parts) + len(gap) * (len(parts) - 1)) / sample_rate

    for i, entry in enumerate(lines, 1):
        try:
            audio = decode_line(data, entry, sample_rate)
        except DuetError as e:
            failed.append(str(e).removeprefix("cannot decode "))
            audio = None
        if audio is not None:
            if group and (_stem(group[0][0])[:2] != _stem(entry)[:2]
                          or length(group + [(entry, audio)]) > join_seconds):
                flush()
            group.append((entry, audio))
        if progress:
            progress(i, len(lines))
    flush()
    return files, written_lines, speech_samples / sample_rate, failed
