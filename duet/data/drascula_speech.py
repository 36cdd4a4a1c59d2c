"""The voice lines of *Drascula: The Vampire Strikes Back* (Debian main: ``drascula``) as audio files.

The English edition holds ~48 min of voice-acted dialogue by about a dozen voices, one headerless file per line in
its ``en`` folder: ``<speaker><number>.ALS`` (``259.ALS`` the hero, ``D40.ALS``, ``VB12.ALS``, ... the other
characters), unsigned 8-bit mono samples at 11,025 Hz; the same folder's ``S<n>.ALS`` and ``F<n>.ALS`` are sound
effects, left out. The transcripts live in the engine's text tables
(``drascula.dat``), which this reader does not parse: label the lines with ``tools/pseudo_label.py`` like any
untranscribed audio. Writing them: ``duet.data.game_speech``.

The game's content and its licence: docs/data.md, "Credits and licences of the data".
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Callable

from duet.errors import DuetError
from duet.data.game_speech import ExtractReport, VoiceLine, write_lines
from duet.io import RawPcm, read_mono

#: Where the Debian package installs the English voice files.
DEBIAN_FOLDER = Path("/usr/share/scummvm/drascula/en")
#: The samples of every voice file.
SAMPLES = RawPcm(sample_rate=11025, subtype="PCM_U8")
# The speaker's letters (none for the hero), then the line's number in that speaker's table. S<n>.ALS are the
# engine's sound effects (it plays them as "s%i.als") and F<n>.ALS hold no speech either: neither is a voice line.
_VOICE_FILE = re.compile(r"(|B|BJ|D|E|I|L|P|T|VB)([0-9]{1,4})\.ALS", re.IGNORECASE)
# The folder of the hero's lines, which carry no speaker letters.
_HERO = "hero"


def decode_file(path: Path, sample_rate: int):
    """One voice file as mono float32 at ``sample_rate``; one that cannot be read is a ``DuetError``
    "<file>: <reason>"."""
    try:
        return read_mono(str(path), sample_rate, raw=SAMPLES)
    except (RuntimeError, OSError) as e:  # sf.LibsndfileError is a RuntimeError
        raise DuetError(f"{path.name}: {e}") from None


def voice_lines(folder: Path) -> list[VoiceLine]:
    """The voice files of ``folder`` as lines, by speaker (its scene: lines are joined within one speaker's) and
    number; a folder that does not exist or holds none is a ``DuetError`` naming it."""
    if not folder.is_dir():
        raise DuetError(f"{folder}: not a folder (give the game's voice folder, e.g. {DEBIAN_FOLDER})")
    found = []
    for path in folder.iterdir():
        match = _VOICE_FILE.fullmatch(path.name)
        if match and path.is_file():
            speaker, number = match.group(1).upper(), int(match.group(2))
            found.append((speaker, number, path))
    if not found:
        raise DuetError(f"{folder}: holds no Drascula voice files (<speaker><number>.ALS)")
    found.sort(key=lambda item: item[:2])

    def line(speaker: str, path: Path) -> VoiceLine:
        return VoiceLine(path.stem.upper(), speaker or _HERO, path.name,
                         lambda sample_rate: decode_file(path, sample_rate))

    return [line(speaker, path) for speaker, _, path in found]


def extract(folder: Path, out_dir: Path, sample_rate: int = 16000, join_seconds: float = 0.0,
            progress: Callable[[int, int], None] | None = None) -> ExtractReport:
    """Write the voice lines of ``folder`` as FLAC files under ``out_dir`` (``duet.data.game_speech.write_lines``:
    ``<speaker>/<first line>[+N].flac``)."""
    return write_lines(voice_lines(folder), out_dir, "drascula", sample_rate, join_seconds, progress)
