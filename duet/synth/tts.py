"""Synthetic "speakers" from the Debian TTS engines (espeak-ng, flite, festival) and their synthesis.

A speaker is one engine voice at one speaking rate, pitch and recording level (:class:`Speaker`).
:func:`speaker_catalogue` is a fixed, seed-independent partition of all speakers into

* ``train`` — the training pool (``tools/make_sample_corpus.py`` draws every training split from it),
* ``pool-dev`` — training-pool voices held out as the validation split of a large ``--hours`` corpus,
* ``dev`` and ``test`` — never used for training. Their espeak-ng voices are accent+variant pairs that
  the pool never contains (at any rate or pitch); their flite and festival speakers use rate/pitch
  settings that lie between the pool's settings.

Rate and pitch units depend on the engine (see :class:`Speaker`). Every clip is resampled to 16 kHz
mono 16-bit FLAC by sox, with leading/trailing silence trimmed to ``PAD_SECONDS``, passed through a
recording channel (:data:`CHANNELS`) and the peak normalised to the speaker's level.
"""

from __future__ import annotations

import random
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import soundfile

SAMPLE_RATE = 16_000
PAD_SECONDS = 0.15
#: Below this the trim step has eaten the clip, or the engine produced nothing.
MIN_SECONDS = 0.4

ESPEAK_ACCENTS = (
    "en-us", "en-gb", "en-gb-scotland", "en-gb-x-rp", "en-gb-x-gbclan", "en-gb-x-gbcwmd", "en-029",
    "en-us-nyc",
)
ESPEAK_VARIANTS = ("m1", "m2", "m3", "m4", "m5", "m6", "m7", "f1", "f2", "f3", "f4", "f5")
# Accent+variant pairs kept out of the training pool entirely.
ESPEAK_TEST = ("en-gb-x-gbcwmd+f4", "en-029+m3", "en-us-nyc+f2", "en-gb-scotland+m6", "en-us+f5")
ESPEAK_DEV = ("en-gb-x-rp+f3", "en-gb-x-gbclan+m4", "en-us+m7", "en-029+f1")
ESPEAK_POOL_SIZE = 60

# flite: (voice, duration_stretch, int_f0_target_mean Hz)
FLITE_POOL = (
    ("kal16", 0.90, 95), ("kal16", 1.00, 110), ("kal16", 1.12, 125),
    ("awb", 0.92, 100), ("awb", 1.00, 115), ("awb", 1.10, 130),
    ("rms", 0.90, 90), ("rms", 1.05, 110), ("rms", 1.15, 122),
    ("slt", 0.90, 160), ("slt", 1.00, 180), ("slt", 1.10, 205),
)
FLITE_DEV = (("awb", 1.05, 108), ("kal16", 0.95, 118))
FLITE_TEST = (("rms", 0.98, 100), ("slt", 1.05, 170))

# festival: (voice, duration stretch, pitch shift in cents applied by sox)
FESTIVAL_POOL = (
    ("kal_diphone", 1.00, 0), ("kal_diphone", 1.10, -150),
    ("ked_diphone", 0.95, 0), ("ked_diphone", 1.10, 150),
    ("cmu_us_slt_arctic_hts", 1.00, 0), ("cmu_us_slt_arctic_hts", 0.90, 200),
)
FESTIVAL_DEV = (("kal_diphone", 0.92, 250),)
FESTIVAL_TEST = (("ked_diphone", 1.02, 300),)

#: Recording channels: sox effects applied to every clip of a corpus. ``telephone`` is a narrowband line:
#: 300-3400 Hz band-pass and a trip through 8 kHz sampling, as in call-centre audio stored at 16 kHz.
CHANNELS = {
    "wideband": [],
    "telephone": ["sinc", "300-3400", "rate", "8000", "rate", str(SAMPLE_RATE)],
}

POOL_DEV_SIZE = 6
_CATALOGUE_SEED = 20261122  # fixed: the partition must not depend on a corpus's --seed


@dataclass(frozen=True)
class Speaker:
    """One synthetic speaker.

    ``rate``: espeak-ng/mbrola words per minute (``-s``); RHVoice percent of normal; flite/festival/pico
    duration stretch (> 1 is slower).
    ``pitch``: espeak-ng/mbrola pitch 0-99 (``-p``); RHVoice percent of normal; flite mean F0 in Hz;
    festival/pico pitch shift in cents (sox).
    ``gain_db``: peak level of every clip in dBFS (varied per speaker, like recording levels).
    """

    id: int
    engine: str
    voice: str
    rate: float
    pitch: float
    gain_db: float
    role: str

    def describe(self) -> str:
        return f"{self.engine} {self.voice} rate={self.rate:g} pitch={self.pitch:g} gain={self.gain_db:g}dB"


def speaker_catalogue() -> list[Speaker]:
    """Every speaker with its role (``train``, ``pool-dev``, ``dev``, ``test``); always the same list."""
    rng = random.Random(_CATALOGUE_SEED)
    held_out = set(ESPEAK_TEST) | set(ESPEAK_DEV)
    identities = [f"{a}+{v}" for a in ESPEAK_ACCENTS for v in ESPEAK_VARIANTS if f"{a}+{v}" not in held_out]
    rng.shuffle(identities)

    def espeak(voice: str) -> tuple[str, str, float, float]:
        return ("espeak-ng", voice, rng.randrange(140, 191, 5), rng.randrange(30, 71, 5))

    pool = [espeak(v) for v in identities[:ESPEAK_POOL_SIZE]]
    pool += [("flite", *s) for s in FLITE_POOL] + [("festival", *s) for s in FESTIVAL_POOL]
    rng.shuffle(pool)
    dev = [espeak(v) for v in ESPEAK_DEV] + [("flite", *s) for s in FLITE_DEV] + [("festival", *s) for s in FESTIVAL_DEV]
    test = [espeak(v) for v in ESPEAK_TEST] + [("flite", *s) for s in FLITE_TEST] + [("festival", *s) for s in FESTIVAL_TEST]

    # pool-dev mixes engines: the first flite and festival pool speakers plus espeak ones
    pool_dev_idx: list[int] = []
    for engine, count in (("flite", 1), ("festival", 1), ("espeak-ng", POOL_DEV_SIZE - 2)):
        pool_dev_idx += [i for i, s in enumerate(pool) if s[0] == engine][:count]

    speakers = []
    for first_id, role_of, settings in ((1001, None, pool), (5001, "dev", dev), (7001, "test", test)):
        for i, (engine, voice, rate, pitch) in enumerate(settings):
            role = role_of or ("pool-dev" if i in pool_dev_idx else "train")
            gain = -float(rng.randrange(50, 111, 5)) / 10
            speakers.append(Speaker(first_id + i, engine, voice, float(rate), float(pitch), gain, role))
    return speakers


#: engine -> how to tell it is installed (a program, or a file its voices need)
OPTIONAL_ENGINES = {
    "festival": "text2wave", "mbrola": "/usr/share/mbrola/us1", "rhvoice": "RHVoice-test", "pico": "pico2wave",
}


#: voices that come in a Debian package of their own: (engine, voice) -> (package, a path it installs). Debian
#: puts festvox-rablpc16k and festvox-don in contrib and the mbrola voices in contrib/non-free, so a machine
#: with main only lacks them while the engine itself is there.
VOICE_PACKAGES = {
    ("festival", "kal_diphone"): ("festvox-kallpc16k", "/usr/share/festival/voices/english/kal_diphone"),
    ("festival", "ked_diphone"): ("festvox-kdlpc16k", "/usr/share/festival/voices/english/ked_diphone"),
    ("festival", "rab_diphone"): ("festvox-rablpc16k", "/usr/share/festival/voices/english/rab_diphone"),
    ("festival", "don_diphone"): ("festvox-don", "/usr/share/festival/voices/english/don_diphone"),
    ("festival", "cmu_us_slt_arctic_hts"): ("festvox-us-slt-hts", "/usr/share/festival/voices/us/cmu_us_slt_arctic_hts"),
    ("mbrola", "mb-us1"): ("mbrola-us1", "/usr/share/mbrola/us1"),
    ("mbrola", "mb-us2"): ("mbrola-us2", "/usr/share/mbrola/us2"),
    ("mbrola", "mb-us3"): ("mbrola-us3", "/usr/share/mbrola/us3"),
    ("mbrola", "mb-en1"): ("mbrola-en1", "/usr/share/mbrola/en1"),
}


def missing_voice_package(speaker: "Speaker") -> str | None:
    """The Debian package this speaker's voice needs when it is not installed, else None."""
    package, probe = VOICE_PACKAGES.get((speaker.engine, speaker.voice), (None, None))
    return package if package and not Path(probe).exists() else None


def missing_voice_packages() -> list[str]:
    """The voice packages of :data:`VOICE_PACKAGES` that are not installed (their speakers are skipped)."""
    return sorted(package for package, probe in VOICE_PACKAGES.values() if not Path(probe).exists())


def usable(speaker: "Speaker", skip_engines=()) -> bool:
    """Whether ``speaker`` can speak here: its engine not skipped and its voice's package installed."""
    return speaker.engine not in skip_engines and missing_voice_package(speaker) is None


def missing_engines() -> tuple[list[str], list[str]]:
    """(required programs that are missing, optional engines that are missing)."""
    required = [p for p in ("espeak-ng", "flite", "sox") if shutil.which(p) is None]
    optional = [engine for engine, probe in OPTIONAL_ENGINES.items()
                if not (Path(probe).exists() if probe.startswith("/") else shutil.which(probe))]
    return required, optional


def _engine_command(speaker: Speaker, text: str, wav: Path) -> list[str]:
    if speaker.engine in ("espeak-ng", "mbrola"):  # mbrola voices are driven through espeak-ng (mb-us1, ...)
        return ["espeak-ng", "-v", speaker.voice, "-s", str(int(speaker.rate)), "-p", str(int(speaker.pitch)),
                "-w", str(wav), text]
    if speaker.engine == "rhvoice":  # reads its text from standard input (see synthesize)
        return ["RHVoice-test", "-p", speaker.voice, "-r", str(int(speaker.rate)), "-t", str(int(speaker.pitch)),
                "-o", str(wav)]
    if speaker.engine == "pico":
        return ["pico2wave", "-l", speaker.voice, "-w", str(wav), text]
    if speaker.engine == "flite":
        return ["flite", "-voice", speaker.voice, "--setf", f"duration_stretch={speaker.rate}",
                "--setf", f"int_f0_target_mean={speaker.pitch}", "-t", text, "-o", str(wav)]
    if speaker.engine == "festival":
        text_file = wav.with_suffix(".txt")
        text_file.write_text(text + "\n", encoding="utf-8")
        return ["text2wave", "-eval", f"(voice_{speaker.voice})",
                "-eval", f"(Parameter.set 'Duration_Stretch {speaker.rate})", str(text_file), "-o", str(wav)]
    raise ValueError(f"speaker {speaker.id}: unknown engine {speaker.engine!r}")


def _sox_effects(speaker: Speaker, channel: str) -> list[str]:
    effects = []
    if speaker.engine == "pico":  # pico has no rate/pitch options: sox changes them
        effects += ["pitch", str(int(speaker.pitch)), "tempo", "-s", f"{1.0 / speaker.rate:.4f}"]
    if speaker.engine == "festival":
        if speaker.pitch:
            effects += ["pitch", str(int(speaker.pitch))]
        if speaker.voice.endswith("_hts") and speaker.rate != 1.0:
            # the HTS voice ignores Duration_Stretch; sox's tempo changes speed without pitch
            effects += ["tempo", "-s", f"{1.0 / speaker.rate:.4f}"]
    return effects + [
        "rate", str(SAMPLE_RATE),
        # trim silence at both ends (reverse trick), then pad a little back
        "silence", "1", "0.02", "-50d", "reverse", "silence", "1", "0.02", "-50d", "reverse",
        *CHANNELS[channel],
        "norm", str(speaker.gain_db),
        "pad", str(PAD_SECONDS), str(PAD_SECONDS),
    ]


def synthesize(speaker: Speaker, text: str, out_flac: str | Path, channel: str = "wideband",
               min_seconds: float = MIN_SECONDS) -> float:
    """Speak ``text`` with ``speaker`` through ``channel`` into a 16 kHz mono 16-bit FLAC; returns its
    duration in seconds. ``min_seconds``: the shortest speech (padding excluded) taken as a clip, lower for one
    short word.

    Raises RuntimeError naming the speaker and file if an engine fails or the clip is empty or silent.
    """
    if channel not in CHANNELS:
        raise ValueError(f"unknown channel {channel!r}; choose from {', '.join(CHANNELS)}")
    out_flac = Path(out_flac)
    with tempfile.TemporaryDirectory(prefix="duet_tts_") as tmp:
        wav = Path(tmp) / "raw.wav"
        for cmd in (_engine_command(speaker, text, wav),
                    # -D: no dither, so the padded silence stays digital zero and costs FLAC nothing
                    ["sox", "-D", str(wav), "-c", "1", "-b", "16", "-C", "8", str(out_flac),
                     *_sox_effects(speaker, channel)]):
            stdin = text if cmd[0] == "RHVoice-test" else None
            result = subprocess.run(cmd, input=stdin, capture_output=True, text=True)
            if result.returncode != 0:
                raise RuntimeError(f"{out_flac.name}: {cmd[0]} failed for speaker {speaker.id} "
                                   f"({speaker.describe()}): {result.stderr.strip()[:200]}")
    audio, rate = soundfile.read(out_flac, dtype="int16")
    duration = len(audio) / rate
    if rate != SAMPLE_RATE or audio.ndim != 1:
        raise RuntimeError(f"{out_flac.name}: expected {SAMPLE_RATE} Hz mono, got {rate} Hz shape {audio.shape}")
    if duration < min_seconds + 2 * PAD_SECONDS or abs(audio.astype("int32")).max() < 300:
        raise RuntimeError(f"{out_flac.name}: speaker {speaker.id} produced an empty or silent clip for {text!r}")
    return duration
