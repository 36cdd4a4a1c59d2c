"""A model's chosen CTC decoding, saved as ``decoding.json`` in the model's folder (or ``<stem>.decoding.json`` beside
a ``.nemo`` that shares its folder).

The demo writes one beside its fine-tuned model (joint decoding, at the width and weights tuned for it);
``tools/pipeline.py`` and ``tools/serve.py`` read the one beside whatever model they are given, once, when no
decoding option says otherwise. The file::

    {"strategy": "beam_lm", "beam_size": 16, "lm": "../demo_lm/lm_text_token6.arpa", "alpha": 1.1, "beta": 4,
     "whisper_weight": 0.5}

``lm`` (any path option) is relative to the file's folder, so the folder can be moved or copied with the LM beside
it. Only ``strategy`` is required; the keys are the options of that strategy's settings dataclass
(``duet.asr.decoding``), defaulting as declared there, checked by the same rules as the command line's, and a
message names the file and the key. An optional
``"min_confidence"`` (0..1) is the low-confidence threshold chosen for this model under this decoding
(``bench/confidence_threshold.py``; confidences depend on both, beam search + LM giving lower ones than greedy):
the pipeline uses it whenever it decodes as the file says, instead of ``duet.asr.confidence.DEFAULT_MIN_CONFIDENCE``.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

from duet.asr.decoding import DecodingInputError, DecodingSettings, all_options, settings_from_values, strategies
from duet.asr.decoding.options import key_of
from duet.errors import DuetError
from duet.foundation.files import write_text_atomic

DECODING_FILE_NAME = "decoding.json"
# the optional key every strategy may have: the model's low-confidence threshold under this decoding
THRESHOLD_KEY = "min_confidence"


class DecodingFileError(DuetError, ValueError):
    """A decoding.json that cannot be used (bad JSON, unknown key, wrong value, missing LM), named in the message."""


@dataclass(frozen=True)
class SavedDecoding:
    """What a model's decoding.json says: its decoding, and the low-confidence threshold chosen for it (or None)."""

    settings: DecodingSettings
    min_confidence: float | None = None


def file_keys() -> dict[str, str]:
    """decoding.json key -> settings field, for every registered strategy's options (their ``Option.key``)."""
    return {key_of(name, opt): name for name, (_, opt, _) in all_options().items()}


def decoding_file_for(model_path: str | os.PathLike) -> Path:
    """Where a model's decoding.json is. A ``.nemo`` that shares its folder with other models may have its own,
    ``<stem>.decoding.json`` beside it (samples/checkpoints holds two bases, each with its own threshold); otherwise
    the folder's ``decoding.json``. A model that is itself a folder (an ONNX export, by default ``<stem>_onnx/`` next
    to the ``.nemo``) may hold its own; otherwise it uses the file of the ``.nemo`` it came from."""
    path = Path(model_path)
    if path.is_dir():
        if (path / DECODING_FILE_NAME).is_file():
            return path / DECODING_FILE_NAME
        if path.name.endswith("_onnx"):  # the export of <stem>.nemo: that model's own file, when it has one
            path = path.with_name(path.name.removesuffix("_onnx") + ".nemo")
    own = path.with_name(f"{path.stem}.{DECODING_FILE_NAME}")
    if path.suffix == ".nemo" and own.is_file():
        return own
    return path.parent / DECODING_FILE_NAME


def write_decoding_file(path: str | os.PathLike, settings: DecodingSettings,
                        min_confidence: float | None = None) -> bool:
    """Save ``settings`` (and ``min_confidence``, when given) to ``path`` (atomically), a path option relative to the
    file's folder. The file is left untouched when it already says the same; returns whether it was written."""
    path = Path(path)
    options = all_options()
    record = {"strategy": settings.strategy}
    for field, value in settings.used_values().items():
        _, opt, _ = options[field]
        if (field == "whisper_weight" and not value) or value is None:
            continue  # off, the default: a file without it says the same
        record[key_of(field, opt)] = os.path.relpath(Path(value).resolve(), path.parent.resolve()) \
            if opt.path else value
    if min_confidence is not None:
        record[THRESHOLD_KEY] = min_confidence
    text = json.dumps(record, indent=1) + "\n"
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return False
    write_text_atomic(path, text)
    return True


def _read_record(path: Path) -> dict:
    """The file's JSON object, its keys checked; a ``DecodingFileError`` otherwise."""
    keys = ["strategy", *file_keys()]
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise DecodingFileError(f"{path}: not valid JSON ({e.msg}, line {e.lineno})") from None
    except OSError as e:
        raise DecodingFileError(f"{path}: cannot read it ({e.strerror or e})") from None
    if not isinstance(record, dict):
        raise DecodingFileError(f"{path}: expected a JSON object with the keys {', '.join(keys)}")
    unknown = sorted(set(record) - set(keys) - {THRESHOLD_KEY})
    if unknown:
        raise DecodingFileError(f"{path}: unknown key {unknown[0]!r} (the keys are {', '.join(keys)}, "
                                f"{THRESHOLD_KEY})")
    return record


def read_decoding_file(path: str | os.PathLike) -> SavedDecoding:
    """The decoding and threshold saved in ``path``, read once; anything wrong with it is a ``DecodingFileError``
    naming the file and the key."""
    path = Path(path)
    record = _read_record(path)
    threshold = record.pop(THRESHOLD_KEY, None)
    if threshold is not None and (not isinstance(threshold, (int, float)) or isinstance(threshold, bool)
                                  or not 0 <= threshold <= 1):
        raise DecodingFileError(f"{path}: {THRESHOLD_KEY!r} must be a number in 0..1, got {threshold!r}")
    strategy = record.pop("strategy", None)
    if strategy not in strategies():
        raise DecodingFileError(f"{path}: 'strategy' must be one of {', '.join(strategies())}, got {strategy!r}")
    keys, options = file_keys(), all_options()
    values = {}
    for key, value in record.items():
        field = keys[key]
        if options[field][1].path and isinstance(value, str):  # relative to the file's folder, and must be there
            located = path.parent / value
            if not located.is_file():
                raise DecodingFileError(f"{path}: its {key} {value} is not there ({located} not found)")
            value = str(located)
        values[field] = value
    try:
        settings = settings_from_values(strategy, values, lambda field: repr(key_of(field, options[field][1])))
    except DecodingInputError as e:  # the rule's message names the key; the file is said once, first
        raise DecodingFileError(f"{path}: {e}") from None
    return SavedDecoding(settings, None if threshold is None else float(threshold))
