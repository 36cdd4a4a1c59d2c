"""Every English voice the Debian TTS engines offer, split into a training pool and held-out voices.

The bundled sample's catalogue (:func:`duet.synth.tts.speaker_catalogue`) uses espeak-ng, flite and
festival. For a base checkpoint that should hear voices beyond its own, :func:`generalisation_pool`
adds every other English voice Debian packages: espeak-ng's named variants, the mbrola voices
(``mbrola-us1/us2/us3/en1``, driven through espeak-ng), the RHVoice English voices, SVOX pico and the
remaining festival diphone voices, each at several rates and pitches.

A voice *identity* is an engine plus the part of its name that sets the timbre: the espeak-ng variant
(``m3``, ``Andy``; the accent only changes pronunciation rules), the mbrola database, the RHVoice,
pico, flite or festival voice. :data:`UNSEEN_IDENTITIES` are never in any training pool at any rate,
pitch or accent, nor in the bundled sample: :func:`unseen_speakers` draws the *unseen-voices*
evaluation set from them alone. :func:`check_exclusion` enforces the rule and the tests call it.

Rates and pitches use each engine's own units (see :class:`duet.synth.tts.Speaker`): espeak-ng and
mbrola words per minute and pitch 0-99, RHVoice percent of normal rate and pitch, pico and festival
a duration stretch and a pitch shift in cents applied by sox.
"""

from __future__ import annotations

import random

from duet.synth.tts import ESPEAK_ACCENTS, Speaker, speaker_catalogue

#: espeak-ng's named voice variants that sound like a person (robotic, demonic and test variants left out).
ESPEAK_NAMED_VARIANTS = (
    "Adam", "Alex", "Alicia", "Andy", "Annie", "Antonio", "Auntie", "Belinda", "Benjamin", "Boris", "Caleb",
    "David", "Denis", "Ed", "Edward", "Gene", "Gustave", "Henrique", "Jacky", "John", "Lee", "Linda",
    "Mario", "Max", "Michael", "Mike", "Pablo", "Paul", "Pedro", "Quincy", "Rob", "Robert", "Steph",
    "Storm", "Tweaky", "Zac", "anika", "grandma", "grandpa", "klatt", "klatt2", "klatt3", "klatt4",
    "norbert", "sandro", "shelby", "travis", "victor", "whisper", "female_whisper", "croak",
    # held out (UNSEEN_IDENTITIES)
    "Hugo", "Andrea", "Steph2", "Gene2", "Iven", "Marco",
)
MBROLA_VOICES = ("mb-us1", "mb-us2", "mb-us3", "mb-en1")
RHVOICE_VOICES = ("alan", "bdl", "slt", "evgeniy-eng", "clb", "lyubov")
PICO_VOICES = ("en-US", "en-GB")
FESTIVAL_VOICES = ("kal_diphone", "ked_diphone", "rab_diphone", "don_diphone", "cmu_us_slt_arctic_hts")
FLITE_VOICES = ("kal16", "awb", "rms", "slt")

#: (engine, identity) pairs reserved for evaluation: no training pool may ever contain them.
UNSEEN_IDENTITIES = frozenset({
    ("espeak-ng", "Hugo"), ("espeak-ng", "Andrea"), ("espeak-ng", "Steph2"), ("espeak-ng", "Gene2"),
    ("espeak-ng", "Iven"), ("espeak-ng", "Marco"),
    ("mbrola", "mb-us3"), ("rhvoice", "clb"), ("rhvoice", "lyubov"), ("pico", "en-GB"),
    ("festival", "don_diphone"),
})

#: The one voice bench/adaptation_ab.py adapts the base to (issue #58): espeak-ng's "Diogo" variant is in no training
#: pool, nor in the bundled sample, nor among :data:`UNSEEN_IDENTITIES` (so adapting to it touches no evaluation voice);
#: :func:`is_new_voice` checks it.
ADAPTATION_VOICE = Speaker(9001, "espeak-ng", "en-gb-scotland+Diogo", 145.0, 35.0, -4.5, "adaptation")

SETTINGS_PER_VOICE = {"espeak-ng": 1, "mbrola": 8, "rhvoice": 8, "pico": 12, "festival": 6}
_POOL_SEED = 20261124  # fixed: the partition and settings never depend on a corpus's --seed
POOL_FIRST_ID = 2001
UNSEEN_FIRST_ID = 8001


def identity(speaker: Speaker) -> tuple[str, str]:
    """The (engine, timbre) pair of a speaker: the espeak-ng variant without its accent, else the voice."""
    if speaker.engine == "espeak-ng":
        return speaker.engine, speaker.voice.split("+", 1)[1] if "+" in speaker.voice else "default"
    return speaker.engine, speaker.voice


def _settings(engine: str, rng: random.Random) -> tuple[float, float]:
    """(rate, pitch) drawn from the spread used for ``engine``."""
    if engine in ("espeak-ng", "mbrola"):
        return float(rng.randrange(120, 211, 5)), float(rng.randrange(20, 81, 5))
    if engine == "rhvoice":
        return float(rng.randrange(80, 131, 5)), float(rng.randrange(80, 121, 5))
    # pico and festival: duration stretch, pitch shift in cents (sox)
    return round(rng.uniform(0.85, 1.2), 2), float(rng.randrange(-300, 301, 50))


def _speakers(identities: list[tuple[str, str]], first_id: int, role: str, rng: random.Random) -> list[Speaker]:
    speakers = []
    for engine, voice in identities:
        for _ in range(SETTINGS_PER_VOICE[engine]):
            if engine == "espeak-ng":
                name = f"{rng.choice(ESPEAK_ACCENTS)}+{voice}"
            else:
                name = voice
            rate, pitch = _settings(engine, rng)
            gain = -float(rng.randrange(30, 121, 5)) / 10
            speakers.append(Speaker(first_id + len(speakers), engine, name, rate, pitch, gain, role))
    return speakers


def _new_identities(held_out: bool) -> list[tuple[str, str]]:
    engines = (("espeak-ng", ESPEAK_NAMED_VARIANTS), ("mbrola", MBROLA_VOICES), ("rhvoice", RHVOICE_VOICES),
               ("pico", PICO_VOICES), ("festival", ("rab_diphone", "don_diphone")))
    return [(engine, voice) for engine, voices in engines for voice in voices
            if ((engine, voice) in UNSEEN_IDENTITIES) == held_out]


def generalisation_pool(skip_engines: tuple[str, ...] = ()) -> list[Speaker]:
    """The training pool for a base checkpoint: the sample's training-pool speakers (less ``pool-dev``)
    plus speakers for every other training identity of every engine (always the same list)."""
    rng = random.Random(_POOL_SEED)
    pool = [s for s in speaker_catalogue() if s.role == "train"]  # pool-dev stays the corpus's dev split
    pool += _speakers(_new_identities(held_out=False), POOL_FIRST_ID, "mix", rng)
    return [s for s in pool if s.engine not in skip_engines]


def unseen_speakers(skip_engines: tuple[str, ...] = ()) -> list[Speaker]:
    """Speakers of the unseen-voices evaluation set: held-out identities only (always the same list)."""
    rng = random.Random(_POOL_SEED + 1)
    speakers = _speakers(_new_identities(held_out=True), UNSEEN_FIRST_ID, "unseen", rng)
    return [s for s in speakers if s.engine not in skip_engines]


def is_new_voice(speaker: Speaker) -> bool:
    """Whether no training pool, bundled-sample speaker or unseen-voices speaker shares ``speaker``'s identity."""
    known = generalisation_pool() + unseen_speakers() + speaker_catalogue()
    return identity(speaker) not in {identity(s) for s in known}


def check_exclusion(training: list[Speaker], unseen: list[Speaker]) -> None:
    """Raise ValueError if an unseen speaker shares its identity with a training or bundled-sample speaker."""
    seen = {identity(s) for s in training} | {identity(s) for s in speaker_catalogue()}
    clash = sorted({identity(s) for s in unseen} & seen)
    if clash:
        raise ValueError(f"unseen-voices speakers share identities with training or sample speakers: {clash}")
    outside = sorted({identity(s) for s in unseen} - UNSEEN_IDENTITIES)
    if outside:
        raise ValueError(f"unseen-voices speakers outside UNSEEN_IDENTITIES: {outside}")
