"""The recorded human speech in ``../shared/real_speech`` (LibriSpeech layout): which sets exist and which
may be trained on.

Its README is the rule: only ``speechocean762/train`` may be trained on or used to choose settings; every
other set is held out. Users of the project do not have the folder, so nothing here is needed by the
tests or by the embedded default; commands that read it name the folder when it is missing.
"""

from __future__ import annotations

from pathlib import Path

from duet.errors import DuetError
from duet.foundation import PROJECT_DIR

DEFAULT_ROOT = PROJECT_DIR.parent / "shared" / "real_speech"
#: The only set that training or tuning may read.
TRAINABLE_SET = "speechocean762/train"
#: Evaluation-only sets, in the order tables list them.
HELD_OUT_SETS = ("speechocean762/test", "read_sentences", "common_voice", "digits", "librispeech_clips")


class RealSpeechMissing(DuetError):
    """The real-speech folder (or one of its sets) is not there."""


def set_dir(root: Path, name: str) -> Path:
    """The split folder of set ``name`` under ``root``; RealSpeechMissing names what is missing."""
    if not root.is_dir():
        raise RealSpeechMissing(f"real-speech folder not found: {root} (give its path with --real-speech)")
    folder = root / name
    if not folder.is_dir():
        raise RealSpeechMissing(f"real-speech set {name!r} not found in {root}")
    return folder


def read_transcripts(split_dir: Path) -> dict[str, str]:
    """{utterance id: transcript as written} of every ``*.trans.txt`` below ``split_dir``."""
    transcripts = {}
    for path in sorted(split_dir.rglob("*.trans.txt")):
        for line in path.read_text(encoding="utf-8").splitlines():
            utt_id, _, text = line.strip().partition(" ")
            if utt_id:
                transcripts[utt_id] = text
    return transcripts


def held_out_transcripts(root: Path = DEFAULT_ROOT) -> list[str]:
    """Every transcript of the held-out sets, for keeping them out of training and LM text; empty when
    the folder is absent (a user's machine), since then no training text can have come from it."""
    if not root.is_dir():
        return []
    return [text for name in HELD_OUT_SETS if (root / name).is_dir()
            for text in read_transcripts(root / name).values()]
