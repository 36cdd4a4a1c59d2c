"""The spoken answer: text to a WAV with espeak-ng, for ``tools/pipeline.py --speak`` and the server's ``speak``."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from duet.foundation.files import atomic_path

SPEAK_ENGINE = "espeak-ng"
SPEAK_ENGINE_MISSING = (f"--speak needs {SPEAK_ENGINE}, which is not installed "
                        "(apt-get install espeak-ng, or bash tools/setup.sh)")


def speak(text: str, out_path: Path) -> str | None:
    """Voice ``text`` into ``out_path`` with espeak-ng; returns an error message naming the file, or None.

    espeak-ng writes a temporary file that is renamed into place, so a failure leaves no partial WAV.
    """
    engine = shutil.which(SPEAK_ENGINE)
    if engine is None:
        return SPEAK_ENGINE_MISSING
    try:
        with atomic_path(out_path) as partial:
            # "--" ends the options: an answer starting with "-" is text to say, not a flag
            result = subprocess.run([engine, "-v", "en-us", "-w", str(partial), "--", text], capture_output=True,
                                    text=True)
            if result.returncode != 0 or partial.stat().st_size == 0:
                raise RuntimeError(f"{SPEAK_ENGINE} failed: {result.stderr.strip() or f'exit code {result.returncode}'}")
    except RuntimeError as e:
        return str(e)
    except OSError as e:  # e.g. the folder cannot be made or written
        return f"cannot write {out_path}: {e.strerror or e}"
    return None


def speak_wav_bytes(text: str) -> tuple[bytes | None, str | None]:
    """``text`` spoken as the bytes of a WAV file, or ``(None, error message)``."""
    with tempfile.TemporaryDirectory(prefix="duet-speak-") as folder:
        out_path = Path(folder) / "answer.wav"
        error = speak(text, out_path)
        return (None, error) if error else (out_path.read_bytes(), None)
