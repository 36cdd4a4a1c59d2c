"""One side of a spoken conversation, as a microphone hears it, for testing turn-taking (``duet.serving.turns``): utterances
with pauses and room noise between them, and where each utterance's speech lies.

:func:`room_noise` is noise without speech, made with numpy alone (no sox, no voices): pink noise (ventilation, a
fan), mains hum with its harmonics, a slow swell of brown noise (traffic through a window) and the clicks of a
keyboard, at a level a laptop microphone gives a quiet office. ``duet.synth.noise`` makes longer noise sets (babble
included) with sox and the TTS voices for training. :func:`compose` joins utterances, each cut to its speech
(:func:`speech_range`), with given gaps of silence or room noise.
"""

from __future__ import annotations

from dataclasses import dataclass

import librosa
import numpy as np

# Where a clean recorded utterance's speech lies: within this many dB of its peak (its own silence is far below)
SPEECH_TOP_DB = 40.0


def coloured_noise(n: int, exponent: float, rng: np.random.Generator) -> np.ndarray:
    """Noise whose power falls as 1/f**exponent (0 white, 1 pink, 2 brown), scaled to unit RMS."""
    spectrum = np.fft.rfft(rng.standard_normal(n))
    frequencies = np.fft.rfftfreq(n)
    frequencies[0] = frequencies[1] if n > 1 else 1.0
    noise = np.fft.irfft(spectrum / frequencies ** (exponent / 2), n)
    return noise / (np.sqrt(np.mean(noise ** 2)) or 1.0)


def room_noise(seconds: float, sample_rate: int = 16000, seed: int = 0, level_dbfs: float = -40.0) -> np.ndarray:
    """``seconds`` of room noise at about ``level_dbfs`` RMS (mono float32); the same samples for the same seed."""
    rng = np.random.default_rng(seed)
    n = int(seconds * sample_rate)
    t = np.arange(n) / sample_rate
    mains = rng.choice([50.0, 60.0])
    hum = sum(np.sin(2 * np.pi * mains * k * t + rng.uniform(0, 2 * np.pi)) / k for k in (1, 2, 3))
    swell = coloured_noise(n, 2.0, rng) * (1 + 0.5 * np.sin(2 * np.pi * 0.2 * t))
    clicks = np.zeros(n)
    for at in rng.uniform(0, max(seconds - 0.05, 0), size=int(2 * seconds)):  # about two key presses a second
        start = int(at * sample_rate)
        length = min(int(0.004 * sample_rate), n - start)
        clicks[start:start + length] += rng.standard_normal(length) * np.exp(-np.arange(length) / 12)
    mix = coloured_noise(n, 1.0, rng) + 0.3 * hum + 0.5 * swell + 3.0 * clicks
    mix *= 10 ** (level_dbfs / 20) / (np.sqrt(np.mean(mix ** 2)) or 1.0)
    return mix.astype(np.float32)


def speech_range(clip: np.ndarray, top_db: float = SPEECH_TOP_DB) -> tuple[int, int]:
    """The samples of a clean utterance from its first sound to its last (an energy threshold: fine on a recording
    with no noise, which is what the sample's utterances are; the VAD is what is tested against it)."""
    _, (start, end) = librosa.effects.trim(clip, top_db=top_db, frame_length=512, hop_length=128)
    return int(start), int(end)


@dataclass(frozen=True)
class Conversation:
    """``audio`` and, per utterance, where its speech lies in it (sample ranges)."""

    audio: np.ndarray
    speech: list[tuple[int, int]]
    sample_rate: int

    def speech_s(self) -> list[tuple[float, float]]:
        return [(a / self.sample_rate, b / self.sample_rate) for a, b in self.speech]


def compose(utterances: list[np.ndarray], gaps_s: list[float], sample_rate: int = 16000, noise_dbfs: float | None = None,
            seed: int = 0) -> Conversation:
    """``gaps_s[0]`` of quiet, the first utterance cut to its speech, ``gaps_s[1]``, the next, ... and
    ``gaps_s[len(utterances)]`` at the end (one gap more than utterances). Quiet is digital silence, or room noise at
    ``noise_dbfs`` laid under the whole recording when given."""
    if len(gaps_s) != len(utterances) + 1:
        raise ValueError(f"gaps_s: {len(utterances) + 1} gaps for {len(utterances)} utterances, got {len(gaps_s)}")
    parts, speech, at = [], [], 0
    for i, gap in enumerate(gaps_s):
        parts.append(np.zeros(int(gap * sample_rate), dtype=np.float32))
        at += len(parts[-1])
        if i < len(utterances):
            start, end = speech_range(utterances[i])
            parts.append(np.asarray(utterances[i][start:end], dtype=np.float32))
            speech.append((at, at + len(parts[-1])))
            at += len(parts[-1])
    audio = np.concatenate(parts)
    if noise_dbfs is not None:
        audio = audio + room_noise(len(audio) / sample_rate + 1, sample_rate, seed, noise_dbfs)[:len(audio)]
    return Conversation(audio.astype(np.float32), speech, sample_rate)
