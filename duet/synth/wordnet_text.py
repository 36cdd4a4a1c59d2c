"""Everyday English sentences from WordNet's usage examples (Debian package ``wordnet-base``).

The template sentences of :mod:`duet.synth.corpus_text` cover the sample's domain with a few hundred
words; people say far more. WordNet 3.0 glosses carry about 48,000 short usage examples
("When you have to hiccup, drink a glass of cold water") over most of the common English vocabulary,
under the WordNet licence (free to use, copy and distribute, with its notice).

Every example is turned into a transcript (numbers in words, punctuation dropped) or skipped when that
cannot be done faithfully (abbreviations, symbols, letters outside a-z). A fixed tenth of them is held
out, by ``duet.data.english_text``'s rule (the reader and the split are that module's) applied to the
transcript: :func:`wordnet_sentences` returns either the training part or the held-out part, so the
unseen-voices evaluation set never speaks a sentence any training corpus holds.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import Iterable

from duet.data.english_text import WORDNET_DIR, part_of, wordnet_usage_examples
from duet.synth.corpus_text import number_to_words, year_to_words
from duet.text import normalize_text

MIN_WORDS, MAX_WORDS = 3, 20

_NUMBER_RE = re.compile(r"\b\d{1,4}\b")
_UNSAFE_RE = re.compile(r"[^A-Za-z0-9 ,.;:!?'\-]|\b[A-Z]{2,}\b|\w\.\w|\d[.,:/]\d|'s'")


_NOT_SPELLABLE = re.compile(r"[^a-z'\s]")


def _to_transcript(example: str) -> str | None:
    """The example as lower-case words, or None when it cannot be spoken and written down faithfully."""
    if _UNSAFE_RE.search(example):
        return None
    def spoken(match: re.Match) -> str:
        n = int(match.group(0))
        # four-digit numbers in the examples are nearly always years ("in 1990")
        return " " + (year_to_words(n) if len(match.group(0)) == 4 and 1100 <= n < 2100 else number_to_words(n)) + " "

    text = _NUMBER_RE.sub(spoken, example)
    if any(c.isdigit() for c in text):
        return None
    # a transcript holds only what the recogniser can write: letters a-z and apostrophes (an accented letter
    # becomes a break, as it always has here, so the held-out tenth and the unseen-voices set stay the same)
    words = normalize_text(_NOT_SPELLABLE.sub(" ", text.lower())).split()
    if not MIN_WORDS <= len(words) <= MAX_WORDS or any(w.strip("'") == "" for w in words):
        return None
    return " ".join(words)


def is_held_out(text: str) -> bool:
    """True for the fixed tenth of sentences kept for evaluation: the ``test`` part of
    :func:`duet.data.english_text.part_of`, of the normalised text."""
    return part_of(normalize_text(text)) == "test"


@lru_cache(maxsize=2)
def _all_sentences(wordnet_dir: Path) -> tuple[str, ...]:
    transcripts = (_to_transcript(example) for example in wordnet_usage_examples(wordnet_dir))
    return tuple(dict.fromkeys(text for text in transcripts if text))


def wordnet_sentences(held_out: bool = False, exclude: Iterable[str] = (),
                      wordnet_dir: Path = WORDNET_DIR) -> list[str]:
    """WordNet usage examples as transcripts, in file order: the training part, or the held-out tenth.

    Texts in ``exclude`` (compared after normalisation) are dropped, e.g. transcripts of evaluation sets.
    """
    excluded = {normalize_text(t) for t in exclude}
    return [s for s in _all_sentences(wordnet_dir) if is_held_out(s) == held_out and s not in excluded]
