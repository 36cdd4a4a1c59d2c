"""SentencePiece tokenizers for NeMo CTC-BPE models, trained from manifest text.

Training is NeMo's own ``create_spt_model`` (the routine behind NeMo's
``process_asr_text_tokenizer.py``), so the folder has exactly NeMo's layout: ``tokenizer.model``,
``tokenizer.vocab`` and ``vocab.txt`` (plus SentencePiece's ``train.log`` and our ``source.json``),
loadable with ``model.tokenizer.dir=<folder>`` and ``model.tokenizer.type=bpe``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tarfile
import tempfile
from pathlib import Path

from duet.errors import DuetError
from duet.io import shown_path
from duet.data.manifest import MANIFEST_DIR
from duet.foundation import PROJECT_DIR, python_command
from duet.foundation.files import native_output_to, read_jsonl

TOKENIZER_TYPES = ("bpe", "unigram")
# tools/train_tokenizer.py's defaults: the recipes' default model.tokenizer.dir (configs/ctc_base.yaml) is the
# folder they make, tokenizers/spe_bpe_v1024 (the report's size; the bundled sample's text supports it)
DEFAULT_TYPE, DEFAULT_VOCAB_SIZE = "bpe", 1024
DEFAULT_MANIFESTS = (MANIFEST_DIR / "train-clean.json",)
DEFAULT_OUT_ROOT = PROJECT_DIR / "tokenizers"


class VocabularyTooLarge(DuetError, ValueError):
    """The text cannot support the requested vocabulary; carries the largest size that fits."""

    def __init__(self, requested: int, largest: int):
        super().__init__(
            f"vocabulary size {requested} is too large for this text: the largest that fits is {largest} "
            f"(pass --vocab-size {largest} or less, or train on more text)"
        )
        self.requested, self.largest = requested, largest


def tokenizer_dir_name(tokenizer_type: str, vocab_size: int) -> str:
    """NeMo's naming convention: the folder says how it was made, e.g. ``spe_bpe_v1024``."""
    return f"spe_{tokenizer_type}_v{vocab_size}"


def training_command(tokenizer_dir: str | os.PathLike, manifests: list[str | os.PathLike]) -> str | None:
    """The ``tools/train_tokenizer.py`` command that writes ``tokenizer_dir`` from the text of ``manifests``
    (defaults left out), or None when the folder's name is not one it writes (``spe_<type>_v<size>``)."""
    folder = Path(tokenizer_dir)
    named = re.fullmatch(rf"spe_({'|'.join(TOKENIZER_TYPES)})_v(\d+)", folder.name)
    if named is None:
        return None
    words = [python_command("tools/train_tokenizer.py")]
    if [Path(m).resolve() for m in manifests] != [m.resolve() for m in DEFAULT_MANIFESTS]:
        words += ["--manifests", *map(shown_path, manifests)]
    if int(named[2]) != DEFAULT_VOCAB_SIZE:
        words += ["--vocab-size", named[2]]
    if named[1] != DEFAULT_TYPE:
        words += ["--type", named[1]]
    if folder.parent.resolve() != DEFAULT_OUT_ROOT.resolve():
        words += ["--out-root", shown_path(folder.parent)]
    return " ".join(words)


def manifest_texts(manifest_paths: list[str | os.PathLike]) -> list[str]:
    texts = []
    for path in manifest_paths:
        for line_no, record in enumerate(read_jsonl(path), 1):
            text = str(record.get("text", "")).strip()
            if not text:
                raise ValueError(f"{path}:{line_no}: empty or missing \"text\"")
            texts.append(text)
    if not texts:
        raise ValueError(f"no text in {', '.join(map(str, manifest_paths))}")
    return texts


#: Written beside the tokenizer: what it was trained on, so a rerun can tell whether it is still current.
SOURCE_FILE = "source.json"


def training_source(texts: list[str], vocab_size: int, tokenizer_type: str) -> dict:
    digest = hashlib.sha256("\n".join(texts).encode("utf-8")).hexdigest()
    return {"type": tokenizer_type, "vocab_size": vocab_size, "lines": len(texts), "text_sha256": digest}


def is_current(out_dir: str | os.PathLike, texts: list[str], vocab_size: int, tokenizer_type: str = "bpe") -> bool:
    """True when ``out_dir`` holds a tokenizer trained with these settings on exactly these texts."""
    source = Path(out_dir) / SOURCE_FILE
    if not (Path(out_dir) / "tokenizer.model").is_file() or not source.is_file():
        return False
    try:
        return json.loads(source.read_text()) == training_source(texts, vocab_size, tokenizer_type)
    except ValueError:  # a damaged source.json: retrain
        return False


def train_tokenizer(texts: list[str], out_dir: str | os.PathLike, vocab_size: int,
                    tokenizer_type: str = "bpe") -> Path:
    """Train a SentencePiece model on ``texts`` into ``out_dir`` (created atomically); returns it.

    Raises :class:`VocabularyTooLarge` when the text supports fewer than ``vocab_size`` pieces.
    The folder also gets ``source.json`` (settings and a hash of the text) for :func:`is_current`.
    """
    if tokenizer_type not in TOKENIZER_TYPES:
        raise ValueError(f"tokenizer type {tokenizer_type!r}: expected one of {', '.join(TOKENIZER_TYPES)}")
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out_dir.parent, prefix=f".{out_dir.name}.") as tmp:
        text_file = Path(tmp, "text.txt")
        text_file.write_text("\n".join(texts) + "\n", encoding="utf-8")
        model_dir = Path(tmp, "tokenizer")
        model_dir.mkdir()
        try:
            # NeMo's start-up lines (OneLogger's among them) go to the log with SentencePiece's
            with native_output_to(model_dir / "train.log"):
                # Imported here: pulling in NeMo costs ~15 s, which --help and argument errors should not pay.
                from nemo.collections.common.tokenizers.sentencepiece_tokenizer import create_spt_model

                create_spt_model(str(text_file), vocab_size, sample_size=-1, do_lower_case=False,
                                 tokenizer_type=tokenizer_type, output_dir=str(model_dir))
        except RuntimeError as e:
            # unigram refuses outright: "Vocabulary size too high (N). Please set it to a value <= M."
            largest = _largest_size_from_error(str(e))
            if largest is None:
                raise
            raise VocabularyTooLarge(vocab_size, largest) from None
        # NeMo trains with hard_vocab_limit=false, so BPE quietly stops short instead of failing.
        actual = sum(1 for _ in open(model_dir / "tokenizer.vocab", encoding="utf-8"))
        if actual < vocab_size:
            raise VocabularyTooLarge(vocab_size, actual)
        text_file.unlink()
        (model_dir / SOURCE_FILE).write_text(json.dumps(training_source(texts, vocab_size, tokenizer_type)) + "\n")
        if out_dir.exists():
            shutil.rmtree(out_dir)
        model_dir.rename(out_dir)
    return out_dir


def _largest_size_from_error(message: str) -> int | None:
    marker = "<= "
    if "Vocabulary size too high" not in message or marker not in message:
        return None
    digits = message.split(marker, 1)[1].split(".")[0].strip()
    return int(digits) if digits.isdigit() else None


#: The files of a tokenizer folder (NeMo's layout, as train_tokenizer writes it) that a .nemo packs under hashed names
TOKENIZER_FILES = ("tokenizer.model", "tokenizer.vocab", "vocab.txt")


def _packed_files(nemo_path: Path, names: tuple[str, ...]) -> dict[str, bytes]:
    """The contents of the files packed inside a ``.nemo`` (a tar archive, each file as ``<hash>_<name>``) whose names
    end with one of ``names``, by that name; a name the archive lacks is left out. An unreadable archive is a
    DuetError naming it."""
    try:
        with tarfile.open(nemo_path) as archive:
            files = [m for m in archive.getmembers() if m.isfile()]
            found = {name: next((m for m in files if m.name.endswith(name)), None) for name in names}
            return {name: archive.extractfile(member).read() for name, member in found.items() if member is not None}
    except (tarfile.TarError, OSError) as e:
        raise DuetError(f"{nemo_path}: cannot read it as a .nemo archive ({e})") from None


def nemo_tokenizer_model(nemo_path: str | os.PathLike, out_dir: str | os.PathLike) -> Path:
    """Copy the SentencePiece ``tokenizer.model`` packed inside a ``.nemo`` to ``out_dir``: the tokenizer a token LM
    must share with that model. A .nemo without one is a DuetError naming it."""
    nemo_path, out_dir = Path(nemo_path), Path(out_dir)
    data = _packed_files(nemo_path, ("tokenizer.model",)).get("tokenizer.model")
    if data is None:
        raise DuetError(f"{nemo_path}: holds no SentencePiece tokenizer.model")
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "tokenizer.model"
    path.write_bytes(data)
    return path


def nemo_tokenizer_folder(nemo_path: str | os.PathLike, out_dir: str | os.PathLike) -> Path:
    """The tokenizer folder packed inside a ``.nemo`` (``TOKENIZER_FILES``), written to ``out_dir``: what
    ``model.tokenizer.dir`` takes to build another model over the same tokens. A .nemo missing one of the files is
    a DuetError naming it."""
    nemo_path, out_dir = Path(nemo_path), Path(out_dir)
    files = _packed_files(nemo_path, TOKENIZER_FILES)
    missing = [name for name in TOKENIZER_FILES if name not in files]
    if missing:
        raise DuetError(f"{nemo_path}: holds no tokenizer {', '.join(missing)}")
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (out_dir / name).write_bytes(data)
    return out_dir
