"""A model's chosen CTC decoding, saved as ``decoding.json`` in the model's folder (or ``<stem>.decoding.json`` beside
a ``.nemo`` that shares its folder).

The demo writes one beside its fine-tuned model (beam search with its token LM, at the width and weights
tuned for them); ``tools/pipeline.py`` reads the one beside whatever model it is given, when no decoding
option says otherwise. The file::

    {"strategy": "beam_lm", "beam_size": 16, "lm": "../demo_lm/lm_text_token6.arpa", "alpha": 1.1, "beta": 4,
     "whisper_weight": 0.5}

``lm`` is relative to the file's folder, so the folder can be moved or copied with the LM beside it.
Only ``strategy`` is required; the others default as in ``duet.asr.decoding.DecodingSettings``
(``whisper_weight``: Whisper's decoder rescoring the beam's candidates, off when absent). An optional
``"min_confidence"`` (0..1) is the low-confidence threshold chosen for this model under this decoding
(``bench/confidence_threshold.py``; confidences depend on both, beam search + LM giving lower ones than greedy):
the pipeline uses it whenever it decodes as the file says, instead of ``duet.asr.confidence.DEFAULT_MIN_CONFIDENCE``.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

from duet.asr.decoding import STRATEGIES, DecodingSettings, ignored_fields
from duet.errors import DuetError
from duet.foundation.files import write_text_atomic

DECODING_FILE_NAME = "decoding.json"
# the file's keys and the DecodingSettings fields they fill; a strategy's file holds the fields it reads
# (duet.asr.decoding.STRATEGY_FIELDS): one it would ignore is refused, never dropped silently
KEYS = {"strategy": "strategy", "beam_size": "beam_size", "lm": "ngram_lm", "alpha": "alpha", "beta": "beta",
        "whisper_weight": "whisper_weight", "whisper_beam": "whisper_beam", "ctc_weight": "ctc_weight",
        "lm_weight": "lm_weight", "token_bonus": "token_bonus", "whisper_sure": "whisper_sure",
        "spoken_share": "spoken_share"}
FILE_KEY = {field: key for key, field in KEYS.items()}
# the optional key every strategy may have: the model's low-confidence threshold under this decoding
THRESHOLD_KEY = "min_confidence"


class DecodingFileError(DuetError, ValueError):
    """A decoding.json that cannot be used (bad JSON, unknown key, wrong value, missing LM), named in the message."""


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
    """Save ``settings`` (and ``min_confidence``, when given) to ``path`` (atomically), the LM as a path relative to
    the file's folder. The file is left untouched when it already says the same; returns whether it was written."""
    path = Path(path)
    record = {"strategy": settings.strategy}
    for field, value in settings.used_values().items():
        if (field == "whisper_weight" and not value) or value is None:
            continue  # off, the default: a file without it says the same
        record[FILE_KEY[field]] = os.path.relpath(Path(value).resolve(), path.parent.resolve()) \
            if field == "ngram_lm" else value
    if min_confidence is not None:
        record[THRESHOLD_KEY] = min_confidence
    text = json.dumps(record, indent=1) + "\n"
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return False
    write_text_atomic(path, text)
    return True


def _read_record(path: Path) -> dict:
    """The file's JSON object, its keys checked (``KEYS`` and ``THRESHOLD_KEY``); a ``DecodingFileError`` otherwise."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise DecodingFileError(f"{path}: not valid JSON ({e.msg}, line {e.lineno})") from None
    except OSError as e:
        raise DecodingFileError(f"{path}: cannot read it ({e.strerror or e})") from None
    if not isinstance(record, dict):
        raise DecodingFileError(f"{path}: expected a JSON object with the keys {', '.join(KEYS)}")
    unknown = sorted(set(record) - set(KEYS) - {THRESHOLD_KEY})
    if unknown:
        raise DecodingFileError(f"{path}: unknown key {unknown[0]!r} (the keys are {', '.join(KEYS)}, "
                                f"{THRESHOLD_KEY})")
    return record


def read_min_confidence(path: str | os.PathLike) -> float | None:
    """The low-confidence threshold saved in ``path`` (None when it has none); a value outside 0..1 is a
    ``DecodingFileError`` naming the file."""
    path = Path(path)
    value = _read_record(path).get(THRESHOLD_KEY)
    if value is not None and (not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value <= 1):
        raise DecodingFileError(f"{path}: {THRESHOLD_KEY!r} must be a number in 0..1, got {value!r}")
    return None if value is None else float(value)


def read_decoding_file(path: str | os.PathLike) -> DecodingSettings:
    """The settings saved in ``path``; anything wrong with it is a ``DecodingFileError`` naming the file."""
    path = Path(path)
    record = _read_record(path)
    record.pop(THRESHOLD_KEY, None)  # not a decoding setting: read_min_confidence reads it
    if record.get("strategy") not in STRATEGIES:
        raise DecodingFileError(f"{path}: 'strategy' must be one of {', '.join(STRATEGIES)}, "
                                f"got {record.get('strategy')!r}")
    for key, kind, low in (("beam_size", int, 1), ("alpha", (int, float), 0), ("beta", (int, float), None),
                           ("whisper_weight", (int, float), 0), ("whisper_beam", int, 1),
                           ("ctc_weight", (int, float), 0), ("lm_weight", (int, float), 0),
                           ("token_bonus", (int, float), None), ("whisper_sure", (int, float), None),
                           ("spoken_share", (int, float), 0)):
        value = record.get(key)
        if value is not None and (not isinstance(value, kind) or isinstance(value, bool) or not math.isfinite(value)
                                  or (low is not None and value < low)):
            number = "a number" if kind is int else "a finite number"
            rule = f"{number} >= {low}" if low is not None else number
            raise DecodingFileError(f"{path}: {key!r} must be {rule}, got {value!r}")
    ignored = sorted(FILE_KEY[field] for field in ignored_fields(record["strategy"],
                                                                 [KEYS[key] for key in record if key != "strategy"]))
    if ignored:
        raise DecodingFileError(f"{path}: {ignored[0]!r} is not used by strategy {record['strategy']}")
    if record["strategy"] == "beam_lm":
        if not isinstance(record.get("lm"), str):
            raise DecodingFileError(f"{path}: strategy beam_lm needs 'lm', the token ARPA's path relative to "
                                    "this file's folder")
    if "lm" in record:
        if not isinstance(record["lm"], str):
            raise DecodingFileError(f"{path}: 'lm' must be the token ARPA's path relative to this file's folder")
        lm = path.parent / record["lm"]
        if not lm.is_file():
            raise DecodingFileError(f"{path}: its LM {record['lm']} is not there ({lm} not found)")
        record["lm"] = str(lm)
    return DecodingSettings(**{KEYS[key]: value for key, value in record.items()})
