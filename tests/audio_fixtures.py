"""Tiny LibriSpeech-style trees written on the fly for fast tests (no TTS engine needed)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import soundfile


def write_tone(path: Path, seconds: float, sample_rate: int = 16000, channels: int = 1, fmt: str = "FLAC") -> int:
    """Write a quiet tone with a little noise; returns the number of samples per channel."""
    n = int(round(seconds * sample_rate))
    t = np.arange(n) / sample_rate
    rng = np.random.default_rng(n)
    wave = 0.2 * np.sin(2 * np.pi * 220 * t) + 0.01 * rng.standard_normal(n)
    data = np.stack([wave] * channels, axis=1) if channels > 1 else wave
    path.parent.mkdir(parents=True, exist_ok=True)
    soundfile.write(path, data, sample_rate, format=fmt, subtype="PCM_16")
    return n


def write_chapter(split_dir: Path, speaker: int, chapter: int, utterances: dict[int, tuple[str, float]]) -> Path:
    """utterances: {utt number: (TRANSCRIPT, seconds)} -> flac files + <spk>-<chap>.trans.txt."""
    chapter_dir = split_dir / str(speaker) / str(chapter)
    chapter_dir.mkdir(parents=True, exist_ok=True)
    lines = []
    for utt, (text, seconds) in utterances.items():
        utt_id = f"{speaker}-{chapter}-{utt:04d}"
        write_tone(chapter_dir / f"{utt_id}.flac", seconds)
        lines.append(f"{utt_id} {text}\n")
    trans = chapter_dir / f"{speaker}-{chapter}.trans.txt"
    trans.write_text("".join(lines), encoding="utf-8")
    return chapter_dir
