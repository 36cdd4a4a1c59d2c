"""General English text available offline, for language-model statistics and held-out perplexity.

WordNet 3.0's usage examples (Debian ``wordnet-base``, WordNet licence): about 48,000 short everyday sentences
("the team is a unit"). This module is their one reader (:func:`wordnet_usage_examples`) and holds the one rule
that splits them (:func:`part_of`): a hash of a text puts it in one part for good, ``estimate`` (8 in 10:
statistics a conversion may learn from), ``dev`` (1 in 10: choosing between options) and ``test`` (1 in 10: the
figures reported, the part no training set holds). Here the sentences are kept as written (case and punctuation
kept); ``duet.synth.wordnet_text`` makes transcripts of them for speech and splits those by the same rule, applied
to the transcript (the text it keeps), so a sentence's part as written and as a transcript may differ: the two
sets feed different models (the SLM's English here, the recogniser's synthetic speech and n-gram LM there), and
hashing either differently would change the sentences behind their published figures. None of them is in
``samples/alpaca_sample.json``.
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


class WordNetMissing(DuetError):
    """WordNet's data files (Debian package ``wordnet-base``) are not installed."""


def part_of(text: str) -> str:
    """The fixed part a text belongs to: a hash of the text exactly as given (0 of 10 buckets ``test``, 1 ``dev``,
    the other eight ``estimate``)."""
    bucket = zlib.crc32(text.encode("utf-8")) % 10
    return "test" if bucket == 0 else "dev" if bucket == 1 else "estimate"


@lru_cache(maxsize=2)
def _usage_examples(wordnet_dir: Path) -> tuple[str, ...]:
    missing = [name for name in WORDNET_FILES if not (wordnet_dir / name).is_file()]
    if missing:
        raise WordNetMissing(f"WordNet data not found in {wordnet_dir} (missing {', '.join(missing)}); "
                             "install it with: apt-get install wordnet-base")
    seen: dict[str, None] = {}
    for name in WORDNET_FILES:
        for line in (wordnet_dir / name).read_text(encoding="latin-1").splitlines():
            if line.startswith("  ") or "|" not in line:  # licence header, or no gloss
                continue
            for example in _EXAMPLE_RE.findall(line.split("|", 1)[1]):
                seen[example.strip()] = None
    return tuple(seen)


def wordnet_usage_examples(wordnet_dir: Path = WORDNET_DIR) -> tuple[str, ...]:
    """Every quoted usage example of WordNet's glosses, stripped, each once, in file order (short ones included);
    WordNetMissing without WordNet."""
    return _usage_examples(Path(wordnet_dir))


@lru_cache(maxsize=2)
def _sentences(wordnet_dir: Path) -> tuple[str, ...]:
    folded = (" ".join(example.split()) for example in _usage_examples(wordnet_dir))
    return tuple(dict.fromkeys(s for s in folded if len(s.split()) >= 3))


def all_wordnet_examples(wordnet_dir: Path = WORDNET_DIR) -> tuple[str, ...]:
    """Every usage example of three words or more, white space folded (all three parts), in file order;
    WordNetMissing without WordNet."""
    return _sentences(Path(wordnet_dir))


def wordnet_examples(part: str, limit: int | None = None, wordnet_dir: Path = WORDNET_DIR) -> list[str]:
    """WordNet's usage examples of one part, in file order, at most ``limit`` spread evenly over the part."""
    if part not in PARTS:
        raise ValueError(f"part must be one of {', '.join(PARTS)}, got {part!r}")
    sentences = [s for s in _sentences(Path(wordnet_dir)) if part_of(s) == part]
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
