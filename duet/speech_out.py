"""The spoken answer: text to a WAV with espeak-ng, for ``tools/pipeline.py --speak`` and the server's ``speak``."""

from __future__ import annotations

import io
import shutil
import subprocess
import wave
from pathlib import Path

from duet.foundation.errors import DiskFullError
from duet.foundation.files import atomic_path

SPEAK_ENGINE = "espeak-ng"
SPEAK_ENGINE_MISSING = (f"--speak needs {SPEAK_ENGINE}, which is not installed "
                        "(apt-get install espeak-ng, or bash tools/setup.sh)")


class SpeakError(RuntimeError):
    """espeak-ng gave no audio for the text."""


def voice(engine: str, text: str) -> bytes:
    """``text`` spoken by ``engine`` (espeak-ng's path) as the bytes of a WAV file; raises :class:`SpeakError`.

    espeak-ng writes to its pipe and this process writes the file: espeak-ng ignores a failed write (a full disk
    leaves a short WAV and exit code 0), Python raises it. On a pipe espeak-ng cannot go back to fill in the
    header's sizes, so the samples are written again under a header that has them (the standard ``wave``).
    """
    # "--" ends the options: an answer starting with "-" is text to say, not a flag
    result = subprocess.run([engine, "-v", "en-us", "--stdout", "--", text], capture_output=True)
    if result.returncode != 0:
        reason = result.stderr.decode(errors="replace").strip() or f"exit code {result.returncode}"
        raise SpeakError(f"{SPEAK_ENGINE} failed: {reason}")
    try:
        with wave.open(io.BytesIO(result.stdout)) as streamed:
            shape = streamed.getnchannels(), streamed.getsampwidth(), streamed.getframerate()
            samples = streamed.readframes(streamed.getnframes())
    except (wave.Error, EOFError) as e:
        raise SpeakError(f"{SPEAK_ENGINE} gave no WAV ({e or 'empty output'})") from None
    if not samples:
        raise SpeakError(f"{SPEAK_ENGINE} gave no audio for the text")
    out = io.BytesIO()
    with wave.open(out, "wb") as wav:
        wav.setnchannels(shape[0])
        wav.setsampwidth(shape[1])
        wav.setframerate(shape[2])
        wav.writeframes(samples)
    return out.getvalue()


def speak(text: str, out_path: Path) -> str | None:
    """Voice ``text`` into ``out_path`` with espeak-ng; returns an error message naming the file, or None.

    The WAV is written to a temporary file that is renamed into place, so a failure leaves no partial WAV.
    """
    engine = shutil.which(SPEAK_ENGINE)
    if engine is None:
        return SPEAK_ENGINE_MISSING
    try:
        wav = voice(engine, text)
        with atomic_path(out_path) as partial:
            partial.write_bytes(wav)
    except SpeakError as e:
        return f"{e} (nothing written to {out_path})"
    except DiskFullError as e:  # names out_path already
        return f"cannot write the spoken answer: {e}"
    except OSError as e:  # e.g. the folder cannot be made or written
        return f"cannot write {out_path}: {e.strerror or e}"
    return None


def speak_wav_bytes(text: str) -> tuple[bytes | None, str | None]:
    """``text`` spoken as the bytes of a WAV file, or ``(None, error message)``; no disk is used."""
    engine = shutil.which(SPEAK_ENGINE)
    if engine is None:
        return None, SPEAK_ENGINE_MISSING
    try:
        return voice(engine, text), None
    except SpeakError as e:
        return None, str(e)
