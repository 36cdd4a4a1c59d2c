"""Noise recordings and room impulse responses for augmentation, made with sox and the TTS voices.

NeMo's Lhotse data loader mixes noise into training audio at a random SNR (``noise_path``,
``noise_snr``, ``noise_mix_prob``) and convolves it with room impulse responses (``rir_enabled``,
``rir_path``; see ``configs/base_tiny_mix.yaml``). No noise or RIR corpus (MUSAN, DEMAND, the
OpenSLR RIRs) can be downloaded here, and lhotse's own synthetic-RIR generator needs torchaudio, which
has no CPU build here. So :func:`build_noise_set` makes a small noise set -- coloured noise (white,
pink, brown), mains hum with harmonics, fluctuating crowd-like noise, a fan, and babble (several
training-pool voices speaking at once; never an unseen-voices speaker) -- written as 16 kHz mono FLAC
with a NeMo manifest (empty transcripts), and a set of impulse responses: a unit impulse passed through
sox's ``reverb`` (Freeverb) at varied reverberance, damping and room size, listed in a lhotse
RecordingSet.
"""

from __future__ import annotations

import random
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import soundfile
from lhotse import Recording, RecordingSet

from duet.data.manifest import write_manifest
from duet.synth.corpus_text import iter_sentences
from duet.synth.tts import SAMPLE_RATE, synthesize
from duet.synth.voices import generalisation_pool

#: name -> sox "synth" arguments (after the duration) and effects
SYNTH_NOISES = {
    "white": (["whitenoise"], []),
    "pink": (["pinknoise"], []),
    "brown": (["brownnoise"], []),
    "hum50": (["sine", "50", "sine", "150"], ["remix", "1-2"]),
    "hum60": (["square", "60"], ["lowpass", "600"]),
    "crowd": (["pinknoise"], ["tremolo", "0.7", "80", "lowpass", "2500"]),
    "fan": (["brownnoise"], ["highpass", "80", "tremolo", "13", "20"]),
}
BABBLE_VOICES = 6
_NOISE_SEED = 20261124


def _sox(args: list[str]) -> None:
    result = subprocess.run(["sox", *args], capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"sox {' '.join(args[:6])} ...: {result.stderr.strip()[:200]}")


def _babble(out: Path, seconds: float, rng: random.Random, tmp: Path) -> None:
    """Several training-pool voices talking over each other, each a chain of sentences ``seconds`` long."""
    speakers = rng.sample(generalisation_pool(), BABBLE_VOICES)
    sentences = iter_sentences(seed=rng.randrange(1 << 30))
    tracks = []
    for i, speaker in enumerate(speakers):
        clips, total = [], 0.0
        while total < seconds:
            clip = tmp / f"b{i}_{len(clips)}.flac"
            total += synthesize(speaker, next(sentences).text, clip)
            clips.append(str(clip))
        track = tmp / f"track{i}.flac"
        _sox([*clips, str(track), "trim", "0", f"{seconds}"])
        tracks.append(str(track))
    _sox(["-m", *tracks, "-b", "16", str(out), "norm", "-3"])


def build_noise_set(out_dir: Path, seconds: float = 20.0, variants: int = 3) -> Path:
    """Write ``variants`` recordings of each noise kind (and of babble) into ``out_dir``; returns the
    manifest path (``out_dir/noise.json``). Same files for the same arguments."""
    rng = random.Random(_NOISE_SEED)
    out_dir.mkdir(parents=True, exist_ok=True)
    entries = []
    with tempfile.TemporaryDirectory(prefix="duet_noise_") as tmp_name:
        tmp = Path(tmp_name)
        for variant in range(variants):
            for name, (synth, effects) in SYNTH_NOISES.items():
                path = out_dir / f"{name}_{variant}.flac"
                _sox(["-n", "-r", str(SAMPLE_RATE), "-c", "1", "-b", "16", str(path), "synth", f"{seconds}", *synth,
                      *effects, "norm", f"{-rng.randrange(1, 10)}"])
                entries.append({"audio_filepath": str(path.resolve()), "duration": seconds, "text": ""})
            path = out_dir / f"babble_{variant}.flac"
            _babble(path, seconds, rng, tmp)
            entries.append({"audio_filepath": str(path.resolve()), "duration": seconds, "text": ""})
    manifest = out_dir / "noise.json"
    write_manifest(manifest, entries)
    return manifest


RIR_SECONDS = 1.0


def build_rir_set(out_dir: Path, count: int = 40) -> Path:
    """Write ``count`` impulse responses (direct sound + sox reverb tail, 16 kHz mono FLAC) into ``out_dir``
    and a lhotse RecordingSet listing them (``out_dir/rir.jsonl.gz``, for ``rir_path``); returns its path."""
    rng = random.Random(_NOISE_SEED + 1)
    out_dir.mkdir(parents=True, exist_ok=True)
    recordings = []
    with tempfile.TemporaryDirectory(prefix="duet_rir_") as tmp_name:
        impulse = Path(tmp_name) / "impulse.wav"
        samples = np.zeros(int(RIR_SECONDS * SAMPLE_RATE), dtype=np.float32)
        samples[0] = 0.5
        soundfile.write(impulse, samples, SAMPLE_RATE, subtype="FLOAT")
        for i in range(count):
            path = out_dir / f"rir_{i:02d}.flac"
            reverberance, damping, room = rng.randrange(20, 96), rng.randrange(10, 90), rng.randrange(20, 101)
            _sox([str(impulse), "-b", "16", str(path), "reverb", str(reverberance), str(damping), str(room),
                  "100", str(rng.randrange(0, 30)), "norm", "-1"])
            recordings.append(Recording.from_file(path, recording_id=path.stem))
    manifest = out_dir / "rir.jsonl.gz"
    RecordingSet.from_recordings(recordings).to_file(manifest)
    return manifest
