"""Voice-acted dialogue of freeware adventure games in Debian main, written as audio files to pseudo-label.

Each game keeps its lines in its own way (``duet.data.queen_speech``: MP3 inside one container; ``duet.data.drascula_speech``:
raw 8-bit files); what they share lives here: a voice line is a name, a scene and a way to read its samples, and
:func:`write_lines` writes lines as 16-bit FLAC files -- optionally joining consecutive lines of a scene, since a
teacher that reads a fixed 30 s window (Whisper) labels several short lines per pass as fast as one -- into an output
folder that remembers its settings, each file whole or not at all, an interrupted run going on where it stopped.

The games' content and licences: docs/data.md, "Credits and licences of the data".
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import soundfile as sf

from duet.errors import DuetError
from duet.foundation.files import atomic_path, write_text_atomic

#: Silence between joined lines, seconds: a pause like a turn change in the games' own dialogue, long enough that a
#: word never runs into the next line's, short enough to waste little of the teacher's window.
JOIN_GAP = 0.3
#: The longest joined file, seconds: under the 30 s that Whisper (the teacher, and the encoder of the base trained
#: on the labels) reads at once, so no joined file is cut.
MAX_JOIN_SECONDS = 29.0
# Written into the output folder: the settings its files were made with (a different join would mix two cuttings
# of the same lines in one folder, and a teacher reading it would label each line twice).
_SETTINGS_FILE = "extract_settings.json"
# A line's name and scene become a file and a folder name under the output folder: nothing else is accepted.
_SAFE_NAME = re.compile(r"[A-Za-z0-9_]{1,16}")


@dataclass(frozen=True)
class VoiceLine:
    """One spoken line: its name (the output file's), the scene it belongs to (lines are joined within a scene only,
    and a scene is a folder), the item it comes from as the game names it (in messages), and how to read it as mono
    float32 at a given rate -- raising a ``DuetError`` "<item>: <reason>" when it cannot be decoded."""

    name: str
    scene: str
    item: str
    read: Callable[[int], np.ndarray]

    def __post_init__(self) -> None:
        for what, value in (("name", self.name), ("scene", self.scene)):
            if not _SAFE_NAME.fullmatch(value):
                raise DuetError(f"voice line {what} {value!r} is not a game file name (corrupt data?)")


@dataclass(frozen=True)
class ExtractReport:
    files: int  # written now or already there
    lines: int  # voice lines inside them
    speech_seconds: float  # their audio, the joins' gaps not counted
    failed: list[str]  # "<item>: <reason>" for each line that could not be decoded


def line_path(out_dir: Path, first: VoiceLine, joined: int = 1) -> Path:
    """Where a file is written: a folder per scene, named by its first line (``+N`` when N more lines follow it)."""
    return out_dir / first.scene / (f"{first.name}.flac" if joined == 1 else f"{first.name}+{joined - 1}.flac")


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


def write_lines(lines: Sequence[VoiceLine], out_dir: Path, source: str, sample_rate: int = 16000,
                join_seconds: float = 0.0, progress: Callable[[int, int], None] | None = None) -> ExtractReport:
    """Write ``lines`` (in the game's order) as 16-bit FLAC files under ``out_dir`` (see :func:`line_path`).

    ``join_seconds`` > 0 (at most ``MAX_JOIN_SECONDS``): consecutive lines of one scene go into one file,
    ``JOIN_GAP`` of silence apart, while it stays within that length. ``source`` names the game's data in the
    folder's settings (two games' lines never share a folder). Files already there are kept; ``out_dir`` refuses
    other settings; each file appears whole or not at all."""
    if not 0 <= join_seconds <= MAX_JOIN_SECONDS:
        raise DuetError(f"--join-seconds must lie in [0, {MAX_JOIN_SECONDS:g}] (Whisper reads 30 s at once), "
                        f"not {join_seconds:g}")
    _prepare_out_dir(out_dir, {"source": source, "sample_rate": sample_rate, "join_seconds": join_seconds,
                               "join_gap": JOIN_GAP})
    gap = np.zeros(int(JOIN_GAP * sample_rate), dtype=np.float32)
    files, written_lines, speech_samples, failed = 0, 0, 0, []
    group: list[tuple[VoiceLine, np.ndarray]] = []

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
            except (OSError, RuntimeError) as e:  # a full disk reaches libsndfile as sf.LibsndfileError
                raise DuetError(f"cannot write {path}: {getattr(e, 'strerror', None) or e}") from None
        files, written_lines = files + 1, written_lines + len(group)
        speech_samples += sum(len(a) for _, a in group)
        group.clear()

    def length(parts: list[tuple[VoiceLine, np.ndarray]]) -> float:
        return (sum(len(a) for _, a in parts) + len(gap) * (len(parts) - 1)) / sample_rate

    for i, line in enumerate(lines, 1):
        try:
            audio = line.read(sample_rate)
            if not len(audio):
                raise DuetError(f"{line.item}: no audio in it")
        except DuetError as e:
            failed.append(str(e))
            audio = None
        if audio is not None:
            if group and (group[0][0].scene != line.scene or length(group + [(line, audio)]) > join_seconds):
                flush()
            group.append((line, audio))
        if progress:
            progress(i, len(lines))
    flush()
    return ExtractReport(files, written_lines, speech_samples / sample_rate, failed)
