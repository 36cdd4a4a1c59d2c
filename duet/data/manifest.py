"""LibriSpeech-style corpus -> NeMo JSONL manifest.

A *split* is any folder holding audio files (``.flac``/``.wav``) and LibriSpeech transcripts
(``<spk>-<chap>.trans.txt`` with lines ``<utterance-id> <TEXT>``), at any depth. Each manifest line is
``{"audio_filepath": <absolute path>, "duration": <seconds, 3 decimals>, "text": <lower case>}``.

:func:`read_manifest` and :func:`write_manifest` are the one place ASR manifests are read and written.

Audio is read in place (no flac->wav conversion) and only its header is parsed (libsndfile through
``soundfile.info``), so a 28 k-file split takes seconds. Every utterance that cannot be used is
reported as a :class:`Problem` naming its id and the reason.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

import soundfile

from duet import SAMPLES_DIR
from duet.errors import AsrInputError
from duet.io import shown_path
from duet.foundation import PROJECT_DIR, python_command
from duet.foundation.files import numbered_jsonl, write_jsonl_atomic
from duet.foundation.spelling import spell_numbers

#: Where tools/make_manifest.py writes <split>.json by default (from the bundled sample: {train,dev,test}-clean)
MANIFEST_DIR = PROJECT_DIR / "manifests"
AUDIO_SUFFIXES = (".flac", ".wav")


def make_manifest_command(path: str | os.PathLike) -> str | None:
    """The ``tools/make_manifest.py`` command that writes ``path`` from the bundled sample (whose split folders it
    reads by default), or None when ``path`` is not ``<one of its splits>.json``."""
    path = Path(path)
    if path.suffix != ".json" or not (SAMPLES_DIR / "LibriSpeech" / path.stem).is_dir():
        return None
    moved = path.resolve().parent != MANIFEST_DIR.resolve()
    return python_command("tools/make_manifest.py", *(["--out-dir", shown_path(path.parent)] if moved else []))
MANIFEST_KEYS = ("audio_filepath", "duration", "text")  # what NeMo needs of every line
TRANSCRIPT_SUFFIX = ".trans.txt"


@dataclass(frozen=True)
class Problem:
    """One utterance (or file) left out of a manifest, and why."""

    item: str
    reason: str

    def __str__(self) -> str:
        return f"{self.item}: {self.reason}"


@dataclass(frozen=True)
class ManifestOptions:
    """Everything that changes a manifest's content; part of the re-run fingerprint."""

    min_duration: float = 0.1
    max_duration: float = 40.0
    sample_rate: int = 16000
    verify_audio: bool = False


@dataclass
class SplitManifest:
    entries: list[dict] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)

    @property
    def hours(self) -> float:
        return sum(e["duration"] for e in self.entries) / 3600.0


def normalize_transcript(text: str) -> str:
    """LibriSpeech transcripts are upper case; NeMo manifests here are lower case, single-spaced, with numbers spelt
    as they are read (a user's "IN 1455" -> "in fourteen fifty five": the recogniser writes no digits)."""
    return " ".join(spell_numbers(text).lower().split())


def _natural_key(utt_id: str) -> list:
    # "103-1240-10" sorts after "103-1240-9", as in LibriSpeech's own listings.
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", utt_id)]


def read_transcripts(split_dir: Path) -> tuple[dict[str, str], set[str], list[Problem]]:
    """Parse every ``*.trans.txt`` below ``split_dir``.

    Returns {utterance id: normalised text} for the usable lines, every id that has a line (usable
    or not, so its audio is not also reported as untranscribed), and the problems.
    """
    texts: dict[str, str] = {}
    seen_at: dict[str, str] = {}
    duplicates: set[str] = set()
    problems: list[Problem] = []
    for trans_path in sorted(split_dir.rglob(f"*{TRANSCRIPT_SUFFIX}")):
        for line_no, raw in enumerate(trans_path.read_bytes().splitlines(), 1):
            if not raw.strip():
                continue
            raw_id, _, raw_text = raw.strip().partition(b" ")
            utt_id = raw_id.decode("utf-8", errors="replace")
            where = f"{trans_path.name}:{line_no}"
            try:
                text = normalize_transcript(raw_text.decode("utf-8"))
            except UnicodeDecodeError:
                problems.append(Problem(utt_id, f"transcript is not valid UTF-8 ({where})"))
                continue
            if utt_id in seen_at:
                duplicates.add(utt_id)
                problems.append(Problem(utt_id, f"duplicate utterance id ({seen_at[utt_id]} and {where})"))
                continue
            seen_at[utt_id] = where
            if not text:
                problems.append(Problem(utt_id, f"empty transcript ({where})"))
                continue
            texts[utt_id] = text
    # Which of two transcripts is right cannot be known: drop the id altogether.
    for utt_id in duplicates:
        texts.pop(utt_id, None)
    return texts, set(seen_at) | {p.item for p in problems}, problems


def find_audio(split_dir: Path) -> tuple[dict[str, Path], list[Problem]]:
    """Map utterance id (file stem) -> audio path for every audio file below ``split_dir``."""
    audio: dict[str, Path] = {}
    duplicates: set[str] = set()
    problems: list[Problem] = []
    for root, _dirs, files in os.walk(split_dir):
        for name in files:
            if not name.lower().endswith(AUDIO_SUFFIXES):
                continue
            path = Path(root, name).resolve()
            utt_id = path.stem
            if utt_id in audio:
                duplicates.add(utt_id)
                problems.append(Problem(utt_id, f"duplicate audio files ({audio[utt_id]} and {path})"))
                continue
            audio[utt_id] = path
    for utt_id in duplicates:
        audio.pop(utt_id, None)
    return audio, problems


def probe_audio(job: tuple[str, str, str, ManifestOptions]) -> dict | Problem:
    """Check one utterance's audio from its header; returns a manifest entry or a Problem.

    Module-level (not a closure) so a process pool can pickle it.
    """
    utt_id, path, text, options = job
    if os.path.getsize(path) == 0:
        return Problem(utt_id, f"empty audio file ({path})")
    try:
        info = soundfile.info(path)
    except (RuntimeError, soundfile.LibsndfileError) as e:
        return Problem(utt_id, f"unreadable audio ({path}): {e}")
    if info.frames <= 0:
        return Problem(utt_id, f"audio has no samples ({path})")
    if info.samplerate != options.sample_rate:
        return Problem(utt_id, f"sample rate {info.samplerate} Hz, expected {options.sample_rate} Hz ({path})")
    if info.channels != 1:
        return Problem(utt_id, f"{info.channels} channels, expected mono ({path})")
    if options.verify_audio:
        # The header can be intact while the stream is truncated: decode everything to be sure.
        try:
            decoded = soundfile.read(path, dtype="int16")[0].shape[0]
        except (RuntimeError, soundfile.LibsndfileError) as e:
            return Problem(utt_id, f"corrupt audio stream ({path}): {e}")
        if decoded != info.frames:
            return Problem(utt_id, f"truncated audio: header says {info.frames} samples, decoded {decoded} ({path})")
    duration = round(info.frames / info.samplerate, 3)
    if not options.min_duration <= duration <= options.max_duration:
        return Problem(
            utt_id,
            f"duration {duration:.3f} s outside [{options.min_duration}, {options.max_duration}] s",
        )
    return {"audio_filepath": path, "duration": duration, "text": text}


def build_split_manifest(
    split_dir: str | os.PathLike,
    options: ManifestOptions = ManifestOptions(),
    jobs: int = 1,
    progress: Callable[[Iterable, int], Iterable] | None = None,
) -> SplitManifest:
    """Pair transcripts with audio below ``split_dir`` and probe each file (in ``jobs`` processes).

    ``progress`` wraps the result iterator (e.g. ``lambda it, n: tqdm(it, total=n)``).
    """
    split_dir = Path(split_dir)
    texts, transcript_ids, problems = read_transcripts(split_dir)
    audio, audio_problems = find_audio(split_dir)
    problems += audio_problems
    for utt_id in sorted(set(texts) - set(audio), key=_natural_key):
        problems.append(Problem(utt_id, "transcript line has no audio file"))
    for utt_id in sorted(set(audio) - transcript_ids, key=_natural_key):
        problems.append(Problem(utt_id, f"audio file has no transcript line ({audio[utt_id]})"))

    work = [(u, str(audio[u]), texts[u], options) for u in sorted(set(texts) & set(audio), key=_natural_key)]
    if jobs > 1 and len(work) > 256:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            results = pool.map(probe_audio, work, chunksize=max(16, len(work) // (jobs * 16)))
            results = list(progress(results, len(work)) if progress else results)
    else:
        results = map(probe_audio, work)
        results = list(progress(results, len(work)) if progress else results)

    manifest = SplitManifest(problems=problems)
    for result in results:
        (manifest.problems if isinstance(result, Problem) else manifest.entries).append(result)
    return manifest


def speaker_of(entry: dict) -> str:
    """The speaker id of a manifest entry: the first part of its LibriSpeech file name (``<spk>-<chap>-<utt>``)."""
    return Path(entry["audio_filepath"]).stem.split("-", 1)[0]


def spread_subset(entries: list[dict], n: int) -> list[dict]:
    """At most ``n`` entries spread evenly over ``entries`` (every k-th, in order): a small, fixed sample of
    a split that still covers all of its speakers and sentence kinds."""
    if n < 1:
        raise ValueError(f"need at least one utterance, got {n}")
    if n >= len(entries):
        return list(entries)
    return [entries[int(i * len(entries) / n)] for i in range(n)]


def hold_out_speakers(entries: list[dict], n_speakers: int) -> tuple[list[dict], list[dict]]:
    """(rest, held out): ``n_speakers`` speakers spread evenly over the sorted speaker ids go to the second
    list with all their utterances, so a dev set carved this way never shares a speaker with training."""
    speakers = sorted({speaker_of(e) for e in entries}, key=_natural_key)
    if not 0 < n_speakers < len(speakers):
        raise ValueError(f"cannot hold out {n_speakers} of {len(speakers)} speakers")
    step = len(speakers) / n_speakers
    chosen = {speakers[int(i * step + step / 2)] for i in range(n_speakers)}
    return ([e for e in entries if speaker_of(e) not in chosen], [e for e in entries if speaker_of(e) in chosen])


def find_splits(data_root: str | os.PathLike) -> list[Path]:
    """Split folders under ``data_root``.

    ``data_root`` is either a corpus root holding split folders (``LibriSpeech/``: transcripts three
    levels down, ``<split>/<spk>/<chap>/*.trans.txt``) or itself a split (transcripts at most two
    levels down), which is returned alone.
    """
    data_root = Path(data_root)
    for pattern in (f"*{TRANSCRIPT_SUFFIX}", f"*/*{TRANSCRIPT_SUFFIX}", f"*/*/*{TRANSCRIPT_SUFFIX}"):
        if next(data_root.glob(pattern), None) is not None:
            return [data_root]
    return sorted(d for d in data_root.iterdir() if d.is_dir() and next(d.rglob(f"*{TRANSCRIPT_SUFFIX}"), None))


def split_fingerprint(split_dir: str | os.PathLike, options: ManifestOptions) -> str:
    """Hash of the options and every file's path, size and mtime: equal means re-running changes nothing."""
    digest = hashlib.sha256(json.dumps(options.__dict__, sort_keys=True).encode())
    split_dir = Path(split_dir).resolve()
    digest.update(str(split_dir).encode())
    for root, dirs, files in os.walk(split_dir):
        dirs.sort()
        for name in sorted(files):
            stat = os.stat(os.path.join(root, name))
            digest.update(f"{root}/{name}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def manifest_is_current(manifest_path: Path, fingerprint: str) -> bool:
    stamp = stamp_path(manifest_path)
    return manifest_path.exists() and stamp.exists() and stamp.read_text().strip() == fingerprint


def stamp_path(manifest_path: Path) -> Path:
    return manifest_path.with_name(f".{manifest_path.name}.stamp")


def read_manifest(path: str | os.PathLike) -> list[dict]:
    """The entries of a NeMo manifest, relative audio paths resolved against its folder (as NeMo does).

    A line that is not a JSON object or lacks one of ``MANIFEST_KEYS`` is an :class:`AsrInputError` naming the
    file and line number."""
    path = Path(path)
    if not path.is_file():
        raise AsrInputError(f"manifest not found: {path}")
    entries = []
    try:
        for line_no, entry in numbered_jsonl(path):
            if not isinstance(entry, dict):
                raise AsrInputError(f"{path}:{line_no}: not a JSON object")
            missing = [k for k in MANIFEST_KEYS if k not in entry]
            if missing:
                raise AsrInputError(f"{path}:{line_no}: lacks {', '.join(missing)}")
            if not Path(entry["audio_filepath"]).is_absolute():
                entry["audio_filepath"] = str(path.parent / entry["audio_filepath"])
            entries.append(entry)
    except ValueError as e:  # not JSON (AsrInputError is a ValueError too: it passes through unchanged)
        raise AsrInputError(str(e)) from None
    return entries


def write_manifest(path: str | os.PathLike, entries: Iterable[dict]) -> int:
    """Write ``entries`` as a NeMo manifest, atomically; an entry lacking one of ``MANIFEST_KEYS`` is an
    :class:`AsrInputError` naming it (by position) before anything is written. Returns the number of lines."""
    entries = list(entries)
    for n, entry in enumerate(entries, 1):
        missing = [k for k in MANIFEST_KEYS if k not in entry]
        if missing:
            raise AsrInputError(f"{path}: entry {n} to write lacks {', '.join(missing)}")
    return write_jsonl_atomic(path, entries)
