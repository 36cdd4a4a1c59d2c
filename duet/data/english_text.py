"""General English text available offline, for language-model statistics and held-out perplexity.

WordNet 3.0's usage examples (Debian ``wordnet-base``, WordNet licence): about 48,000 short everyday sentences
("the team is a unit"), read as written (case and punctuation kept, unlike the transcripts that
``duet.synth.wordnet_text`` makes of them for speech). A hash of each sentence puts it in one part for good:
``estimate`` (8 in 10: statistics a conversion may learn from), ``dev`` (1 in 10: choosing between options) and
``test`` (1 in 10: the figures reported). None of them is in ``samples/alpaca_sample.json``.
"""

from __future__ import annotations

import re
import zlib
from functools import lru_cache
from pathlib import Path

from duet.errors import DuetError
from duet.data.real_speech import DEFAULT_ROOT, read_transcripts, set_dir

WORDNET_DIR = Path("/usr/share/wordnet")
WORDNET_FILES = ("data.noun", "data.verb", "data.adj", "data.adv")
PARTS = ("estimate", "dev", "test")
_EXAMPLE_RE = re.compile(r'"([^"]+)"')


class EnglishTextMissing(DuetError):
    """The text's Debian package is not installed."""


def part_of(sentence: str) -> str:
    """The fixed part a sentence belongs to (a hash of its text)."""
    bucket = zlib.crc32(sentence.encode("utf-8")) % 10
    return "test" if bucket == 0 else "dev" if bucket == 1 else "estimate"


@lru_cache(maxsize=2)
def _wordnet_examples(wordnet_dir: Path) -> tuple[str, ...]:
    missing = [name for name in WORDNET_FILES if not (wordnet_dir / name).is_file()]
    if missing:
        raise EnglishTextMissing(f"WordNet data not found in {wordnet_dir} (missing {', '.join(missing)}); "
                                 "install it with: apt-get install wordnet-base")
    seen: dict[str, None] = {}
    for name in WORDNET_FILES:
        for line in (wordnet_dir / name).read_text(encoding="latin-1").splitlines():
            if line.startswith("  ") or "|" not in line:  # licence header, or no gloss
                continue
            for example in _EXAMPLE_RE.findall(line.split("|", 1)[1]):
                example = " ".join(example.split())
                if len(example.split()) >= 3:
                    seen[example] = None
    return tuple(seen)


def all_wordnet_examples(wordnet_dir: Path = WORDNET_DIR) -> tuple[str, ...]:
    """Every usage example of WordNet (all three parts), in file order; EnglishTextMissing without WordNet."""
    return _wordnet_examples(Path(wordnet_dir))


def wordnet_examples(part: str, limit: int | None = None, wordnet_dir: Path = WORDNET_DIR) -> list[str]:
    """WordNet's usage examples of one part, in file order, at most ``limit`` spread evenly over the part."""
    if part not in PARTS:
        raise ValueError(f"part must be one of {', '.join(PARTS)}, got {part!r}")
    sentences = [s for s in _wordnet_examples(Path(wordnet_dir)) if part_of(s) == part]
    if limit is not None and limit < len(sentences):
        step = len(sentences) / limit
        sentences = [sentences[int(i * step)] for i in range(limit)]
    return sentences


_LONE_I = re.compile(r"\bi\b")


def as_sentence(transcript: str) -> str:
    """An upper-case, unpunctuated transcript (LibriSpeech layout) as a sentence: lower case, its first letter and
    the pronoun "I" capitalised, a full stop at the end. Names stay lower case; nothing else is restored."""
    text = _LONE_I.sub("I", " ".join(transcript.split()).lower())
    return f"{text[:1].upper()}{text[1:]}." if text else ""


#: General English held out of every training set: WordNet's usage examples, and the transcripts of two held-out
#: sets of ../shared/real_speech written as sentences (evaluation only, as that folder's README allows)
HELD_OUT_TEXTS = ("wordnet", "common_voice", "read_sentences")


def held_out_english(name: str, limit: int | None = None, part: str = "test",
                     real_speech: Path = DEFAULT_ROOT) -> tuple[str, list[str]]:
    """(description, sentences) of one of HELD_OUT_TEXTS: WordNet's examples of ``part`` (at most ``limit``), or
    every transcript of a real-speech set through :func:`as_sentence`."""
    if name == "wordnet":
        texts = wordnet_examples(part, limit)
        return f"{len(texts)} WordNet usage examples ({part} part of duet.data.english_text)", texts
    if name not in HELD_OUT_TEXTS:
        raise ValueError(f"text must be one of {', '.join(HELD_OUT_TEXTS)}, got {name!r}")
    texts = [as_sentence(t) for t in read_transcripts(set_dir(Path(real_speech), name)).values() if t.strip()]
    return f"{len(texts)} transcripts of {Path(real_speech) / name}, written as sentences", texts
