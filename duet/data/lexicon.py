"""The English words a transcript may hold: what ``duet.asr.confidence`` checks a recogniser's words against.

A recogniser that mishears often writes what it heard letter by letter ("prantin then for oura porpes"), and it
can be sure of those frames. Such a word is in no dictionary, so it is a sign of mishearing that the acoustic
confidence misses. The lexicon is every single-word lemma of WordNet 3.0, every word of its usage examples (the
inflected forms and the function words that WordNet's lemmas lack; Debian ``wordnet-base``, WordNet licence) and
every word of the bundled sample's training transcripts (the assistant's own names, cities and commands). Built
once per process (about a second), held in memory.
"""

from __future__ import annotations

import json
import logging
import re
from functools import lru_cache
from pathlib import Path

from duet.data.english_text import WORDNET_DIR, WordNetMissing, all_wordnet_examples
from duet.foundation import SAMPLES_DIR
from slm.tool_calls import execute_calls

log = logging.getLogger(__name__)

SAMPLE_TRAINING_TEXT = SAMPLES_DIR / "LibriSpeech" / "train-clean"
WORDNET_INDEXES = ("index.noun", "index.verb", "index.adj", "index.adv")
_WORD = re.compile(r"[a-z]+(?:'[a-z]+)*")


def words_of(text: str) -> list[str]:
    """The lower-case words of ``text`` (letters and inner apostrophes; punctuation and digits dropped)."""
    return _WORD.findall(text.lower())


@lru_cache(maxsize=2)
def english_words(wordnet_dir: Path = WORDNET_DIR, sample_dir: Path = SAMPLE_TRAINING_TEXT) -> frozenset[str] | None:
    """The lexicon (module doc), or None where WordNet is not installed (one warning: the check is then off)."""
    try:
        sentences = all_wordnet_examples(Path(wordnet_dir))
    except WordNetMissing as e:
        log.warning("%s; transcripts are not checked against a lexicon", e)
        return None
    words: set[str] = set()
    for sentence in sentences:
        words.update(words_of(sentence))
    for name in WORDNET_INDEXES:
        for line in (Path(wordnet_dir) / name).read_text(encoding="latin-1").splitlines():
            if line and not line.startswith(" "):  # licence header lines start with spaces
                lemma = line.split(" ", 1)[0]
                if _WORD.fullmatch(lemma):  # single words only: "ice_cream" is two
                    words.add(lemma)
    for transcripts in sorted(Path(sample_dir).rglob("*.trans.txt")):
        for line in transcripts.read_text(encoding="utf-8").splitlines():
            words.update(words_of(line.partition(" ")[2]))
    return frozenset(words)


ALPACA_SAMPLE = SAMPLES_DIR / "alpaca_sample.json"


@lru_cache(maxsize=1)
def answer_words(wordnet_dir: Path = WORDNET_DIR) -> frozenset[str] | None:
    """The words a language model's answer may hold (``slm.metrics.well_formed``): :func:`english_words` and the
    words of the answers of ``samples/alpaca_sample.json`` (the assistant's taught vocabulary: "app", "lo-fi"), their
    tool calls executed; None where WordNet is not installed."""
    words = english_words(Path(wordnet_dir))
    if words is None:
        return None
    taught = {word for row in json.loads(ALPACA_SAMPLE.read_text(encoding="utf-8"))
              for word in words_of(execute_calls(row["output"], request=row["instruction"]).text)}
    return words | taught
