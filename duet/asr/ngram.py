"""N-gram language models for CTC beam search (shallow fusion), estimated by KenLM's ``lmplz``.

``lmplz`` estimates an interpolated modified Kneser-Ney model and writes ARPA; ``build_binary`` turns
the ARPA into KenLM's binary format (faster to load for KenLM-based decoders). Neither is on PyPI or in
Debian as a binary: ``tools/setup.sh`` compiles both from the ``kenlm`` PyPI sdist into ``.venv/bin``.

Two kinds of model, chosen by ``unit``:

* ``token`` — over the ASR model's SentencePiece tokens, each written as one character
  ``chr(id + 100)`` (NeMo's ``DEFAULT_TOKEN_OFFSET`` convention). This is what NeMo's CTC decoders with
  an n-gram (``beam_batch``, ``beam``, ``flashlight``) read, so it must be built with the tokenizer
  of the model that will decode.
* ``word`` — an ordinary word model (for word-level decoders such as pyctcdecode, or for KenLM queries).

Each ARPA gets a sidecar ``<arpa>.json`` (unit, order, vocabulary size, text source, n-gram counts) so a
decoder can refuse an LM built for another tokenizer.
"""

from __future__ import annotations

import glob
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

from duet.errors import DuetError
from duet.text import normalize_text
from duet.data.tokenizer import nemo_tokenizer_model
from duet.foundation.files import atomic_path, read_jsonl, write_text_atomic

log = logging.getLogger(__name__)

UNITS = ("token", "word")
#: KenLM is compiled with KENLM_MAX_ORDER=6 (tools/setup.sh); NeMo recommends order 6 for subword LMs.
MAX_ORDER = 6
DEFAULT_ORDER = {"token": 6, "word": 3}


class NgramInputError(DuetError, ValueError):
    """Bad user input (missing file, empty text, bad order, missing lmplz): one line, no stack trace."""


@dataclass
class NgramLmInfo:
    """What the sidecar ``<arpa>.json`` records about an LM."""

    unit: str
    order: int
    sentences: int
    ngram_counts: dict[str, int]
    text_source: str
    vocab_size: int | None = None  # ASR tokenizer size (token LMs): the decoder checks it
    tokenizer: str | None = None
    binary: str | None = None
    estimator: str = "kenlm lmplz (interpolated modified Kneser-Ney, --discount_fallback)"
    extra: dict = field(default_factory=dict)


def find_kenlm_tool(name: str) -> Path | None:
    """Path of a KenLM program: ``$KENLM_BIN``, then beside the running Python (``.venv/bin``), then PATH."""
    candidates = []
    if os.environ.get("KENLM_BIN"):
        candidates.append(Path(os.environ["KENLM_BIN"]) / name)
    candidates.append(Path(sys.executable).parent / name)
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return path
    found = shutil.which(name)
    return Path(found) if found else None


def read_training_text(path: str | Path) -> list[str]:
    """Sentences from a NeMo manifest (``.json``/``.jsonl``: each line's ``text``) or a plain text file
    (one sentence per line), normalised like the WER scorer (lower case, no punctuation but apostrophes)."""
    path = Path(path)
    if not path.is_file():
        raise NgramInputError(f"text file not found: {path}")
    if path.suffix in (".json", ".jsonl"):
        try:
            entries = read_jsonl(path)
        except ValueError as e:
            raise NgramInputError(str(e)) from None
        texts = []
        for n, entry in enumerate(entries, 1):
            if not isinstance(entry, dict) or "text" not in entry:
                raise NgramInputError(f"{path}: entry {n} has no 'text' key")
            texts.append(str(entry["text"]))
    else:
        texts = path.read_text(encoding="utf-8").splitlines()
    sentences = [s for s in (normalize_text(t) for t in texts) if s]
    if not sentences:
        raise NgramInputError(f"no text in {path}: every line is empty after normalisation")
    return sentences


def load_tokenizer(tokenizer_dir: str | Path):
    """NeMo's SentencePiece tokenizer from a folder holding ``tokenizer.model`` (as the ASR model uses it), or
    from a ``.nemo`` model itself (the tokenizer packed inside it)."""
    # NeMo takes ~21 s to import: only the calls that use it pay for it
    from nemo.collections.common.tokenizers import SentencePieceTokenizer

    if Path(tokenizer_dir).suffix == ".nemo":
        if not Path(tokenizer_dir).is_file():
            raise NgramInputError(f"tokenizer: model not found: {tokenizer_dir}")
        return SentencePieceTokenizer(str(nemo_tokenizer_model(tokenizer_dir, tempfile.mkdtemp(prefix="duet_tok_"))))
    model_path = Path(tokenizer_dir) / "tokenizer.model"
    if not model_path.is_file():
        raise NgramInputError(f"tokenizer folder has no tokenizer.model: {tokenizer_dir}")
    return SentencePieceTokenizer(str(model_path))


def tokens_as_words(sentences: Sequence[str], tokenizer) -> list[str]:
    """Each sentence as NeMo's token-LM text: one character per token id (``chr(id + 100)``), space-separated."""
    # NeMo takes ~21 s to import: only the calls that use it pay for it
    from nemo.collections.asr.parts.submodules.ngram_lm.kenlm_utils import tokenize_str

    return [" ".join(chars) for chars in tokenize_str([[s] for s in sentences], tokenizer)]


def arpa_ngram_counts(arpa: str | Path) -> dict[str, int]:
    """The ``ngram N=count`` lines of an ARPA header."""
    counts = {}
    with open(arpa, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line.startswith("ngram ") and "=" in line:
                order, count = line[len("ngram ") :].split("=")
                counts[order] = int(count)
            elif line.startswith("\\1-grams:"):
                break
    return counts


def _run_kenlm(cmd: list[str], what: str) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        last = [line for line in proc.stderr.splitlines() if line.strip()][-3:]
        raise RuntimeError(f"{what} failed (exit {proc.returncode}): {' | '.join(last)}")


def train_ngram_lm(
    sentences: Sequence[str],
    out_arpa: str | Path,
    order: int,
    unit: str = "word",
    tokenizer_dir: str | Path | None = None,
    tokenizer=None,
    text_source: str = "",
    binary: bool = True,
    memory: str = "10%",
) -> NgramLmInfo:
    """Estimate an ``order``-gram model of ``sentences`` with ``lmplz`` and write it atomically.

    Writes ``out_arpa``, ``<out_arpa>.json`` and, when ``binary`` and ``build_binary`` exists,
    ``<out_arpa stem>.bin``. A token LM needs the ASR tokenizer: ``tokenizer_dir`` (a SentencePiece
    folder) or ``tokenizer`` (a NeMo tokenizer object, e.g. ``model.tokenizer``). ``--discount_fallback`` lets lmplz estimate small corpora whose
    count-of-counts cannot give Kneser-Ney discounts (it then uses KenLM's fallback discounts).
    """
    if unit not in UNITS:
        raise NgramInputError(f"unit must be one of {UNITS}, got {unit!r}")
    if not 1 <= order <= MAX_ORDER:
        raise NgramInputError(f"order must be between 1 and {MAX_ORDER} (KenLM's compiled maximum), got {order}")
    if order == 1:
        # lmplz needs at least a bigram model; a unigram LM is useless for fusion anyway
        raise NgramInputError("order 1 is not supported by lmplz: use --order 2 or more")
    if not sentences:
        raise NgramInputError("no training sentences")
    lmplz = find_kenlm_tool("lmplz")
    if lmplz is None:
        raise NgramInputError("KenLM's lmplz not found (looked in $KENLM_BIN, .venv/bin, PATH): run bash tools/setup.sh")

    vocab_size = None
    if unit == "token":
        if tokenizer is None and tokenizer_dir is None:
            raise NgramInputError("a token LM needs the ASR model's tokenizer: pass --tokenizer DIR")
        tokenizer = tokenizer if tokenizer is not None else load_tokenizer(tokenizer_dir)
        vocab_size = int(tokenizer.vocab_size)
        lines = tokens_as_words(sentences, tokenizer)
    else:
        lines = list(sentences)

    out_arpa = Path(out_arpa)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="duet_lmplz_") as tmp:
        text_file = Path(tmp) / "train.txt"
        text_file.write_text("\n".join(lines) + "\n", encoding="utf-8")
        with atomic_path(out_arpa) as tmp_arpa:
            _run_kenlm(
                [str(lmplz), "-o", str(order), "--text", str(text_file), "--arpa", str(tmp_arpa),
                 "--discount_fallback", "-S", memory, "-T", tmp],
                "lmplz",
            )
            counts = arpa_ngram_counts(tmp_arpa)
    log.info("lmplz: %d-gram %s LM from %d sentences in %.1f s", order, unit, len(lines), time.perf_counter() - start)

    binary_path = None
    build_binary = find_kenlm_tool("build_binary") if binary else None
    if binary and build_binary is None:
        log.warning("KenLM's build_binary not found: wrote ARPA only")
    if build_binary is not None:
        binary_path = out_arpa.with_suffix(".bin")
        with atomic_path(binary_path) as tmp_bin:
            _run_kenlm([str(build_binary), "-s", str(out_arpa), str(tmp_bin)], "build_binary")

    info = NgramLmInfo(
        unit=unit, order=order, sentences=len(lines), ngram_counts=counts, text_source=text_source,
        vocab_size=vocab_size, tokenizer=str(tokenizer_dir) if tokenizer_dir else (type(tokenizer).__name__ if tokenizer else None),
        binary=str(binary_path) if binary_path else None,
    )
    write_text_atomic(sidecar_path(out_arpa), json.dumps(asdict(info), indent=2) + "\n")
    return info


def sidecar_path(arpa: str | Path) -> Path:
    arpa = Path(arpa)
    return arpa.with_name(arpa.name + ".json")


def read_lm_info(arpa: str | Path) -> dict | None:
    """The sidecar written by ``train_ngram_lm`` (None for an ARPA made elsewhere)."""
    path = sidecar_path(arpa)
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


#: (ARPA path, its mtime_ns, vocabulary size) -> NeMo form of that ARPA, for this process
_NEMO_FORM_OF_ARPA: dict[tuple[str, int, int], Path] = {}


def nemo_token_lm(arpa: str | Path, vocab_size: int) -> Path:
    """NeMo's own form (``NGramGPULanguageModel`` saved as ``.nemo``) of a token ARPA, built once per ARPA version.

    NeMo's ``beam_batch`` parses an ARPA in Python each time a decoding strategy is set (minutes for a
    LibriSpeech-size LM); the ``.nemo`` form restores as a state dict. It is written beside the ARPA as
    ``<stem>.v<vocab>.<mtime_ns>.nemo``, so a rebuilt ARPA gets a fresh one (the stale one is removed); where the
    ARPA's folder is read-only it goes to a temporary folder kept for this process.
    """
    from nemo.collections.asr.parts.submodules.ngram_lm import NGramGPULanguageModel  # NeMo takes 10-20 s to import

    arpa = Path(arpa).resolve()
    mtime_ns = arpa.stat().st_mtime_ns
    key = (str(arpa), mtime_ns, vocab_size)
    known = _NEMO_FORM_OF_ARPA.get(key)
    if known is not None and known.is_file():
        return known
    prefix = f"{arpa.stem}.v{vocab_size}."
    target = arpa.parent / f"{prefix}{mtime_ns}.nemo"
    if not target.is_file():
        lm = NGramGPULanguageModel.from_arpa(lm_path=arpa, vocab_size=vocab_size)
        try:
            with atomic_path(target) as tmp:
                lm.save_to(str(tmp))
        except OSError as err:
            log.warning("cannot write %s (%s); keeping the LM's NeMo form in a temporary folder", target, err)
            target = Path(tempfile.mkdtemp(prefix="duet-ngram-")) / target.name
            lm.save_to(str(target))
        else:
            for stale in arpa.parent.glob(glob.escape(prefix) + "*.nemo"):
                if stale != target:
                    stale.unlink(missing_ok=True)
        log.info("n-gram LM %s converted to NeMo's form: %s", arpa.name, target)
    _NEMO_FORM_OF_ARPA[key] = target
    return target


def load_token_lm(arpa: str | Path, vocab_size: int):
    """NeMo's batched n-gram model (``NGramGPULanguageModel``, the one ``beam_batch`` fuses) from a token ARPA."""
    from nemo.collections.asr.parts.submodules.ngram_lm import NGramGPULanguageModel  # NeMo takes 10-20 s to import

    return NGramGPULanguageModel.from_file(lm_path=str(nemo_token_lm(arpa, vocab_size)), vocab_size=vocab_size)


def score_token_sentences(lm, tokenizer, sentences: Sequence[str]):
    """Total natural-log probability of each sentence (with sentence end) under a token LM."""
    # torch takes ~9 s to import: only the calls that use it pay for it
    import torch

    ids = [tokenizer.text_to_ids(s) for s in sentences]
    lengths = torch.tensor([len(x) for x in ids])
    labels = torch.zeros(len(ids), int(lengths.max()), dtype=torch.long)
    for row, x in enumerate(ids):
        labels[row, : len(x)] = torch.tensor(x)
    with torch.inference_mode():
        scores = lm.score_sentences(labels=labels, labels_lengths=lengths, bos=True, eos=True)
    return scores.sum(dim=1).tolist()
