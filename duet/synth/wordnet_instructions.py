"""Alpaca-format instruction rows about everyday words, made from WordNet 3.0 (Debian ``wordnet-base``).

The bundled sample (:mod:`duet.synth.alpaca_sample`) teaches a few assistant templates; a model fine-tuned on it
answers every question outside them with the nearest template ("I don't have access to live weather data").
These rows ask about thousands of other words, in two plain forms, and answer with WordNet's own definition or
usage example, so that fine-tuning teaches "answer about the thing asked" rather than "pick a template":

- "what does the word X mean" -> "X means <its first definition>." (nouns, verbs, adjectives)
- "use the word X in a sentence" -> one of WordNet's usage examples that contains X, from the "estimate" part of
  :mod:`duet.english_text` only (never a sentence that ``bench/slm_english_perplexity.py`` scores)

Every row whose question or answer holds a word of ``exclude`` (the open requests' words: what
``bench/slm_open_requests.py`` asks) is dropped, so no row answers, or names the answer of, an evaluation request.
WordNet licence: free to use, copy and distribute, with its notice (README credits).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from pathlib import Path

from duet.english_text import part_of
from duet.errors import DuetError

WORDNET_DIR = Path("/usr/share/wordnet")
KINDS = ("definition", "usage")
_POS_FILES = {"noun": "data.noun", "verb": "data.verb", "adj": "data.adj"}
_WORD_RE = re.compile(r"^[a-z]+$")
_EXAMPLE_RE = re.compile(r'"([^"]+)"')
_TOKEN_RE = re.compile(r"[a-z0-9]+")
# function words never count as a shared word between a row and an excluded request
STOPWORDS = frozenset("""a an the of to in on at for with and or is are was be do does did you your my me i it
what who how many much which when where why that this there their have has can say says called""".split())


class WordNetMissing(DuetError):
    """WordNet's data files are not installed."""


@dataclass(frozen=True)
class Synset:
    pos: str
    words: tuple[str, ...]
    definition: str
    examples: tuple[str, ...]


def _parse(line: str, pos: str) -> Synset | None:
    if line.startswith("  ") or "|" not in line:  # licence header, or no gloss
        return None
    head, gloss = line.split("|", 1)
    fields = head.split()
    count = int(fields[3], 16)
    words = tuple(fields[4 + 2 * i].lower() for i in range(count))
    definition = gloss.split('"', 1)[0].strip().rstrip(";").strip()
    return Synset(pos, words, definition, tuple(e.strip() for e in _EXAMPLE_RE.findall(gloss)))


def read_synsets(wordnet_dir: Path = WORDNET_DIR) -> list[Synset]:
    """Every synset of WordNet's noun, verb and adjective files, in file order."""
    missing = [name for name in _POS_FILES.values() if not (Path(wordnet_dir) / name).is_file()]
    if missing:
        raise WordNetMissing(f"WordNet data not found in {wordnet_dir} (missing {', '.join(missing)}); "
                             "install it with: apt-get install wordnet-base")
    synsets = []
    for pos, name in _POS_FILES.items():
        for line in (Path(wordnet_dir) / name).read_text(encoding="latin-1").splitlines():
            synset = _parse(line, pos)
            if synset is not None:
                synsets.append(synset)
    return synsets


def _clean_word(word: str) -> str | None:
    word = re.sub(r"\(.*\)$", "", word)  # adjective markers such as "(a)"
    return word if _WORD_RE.match(word) else None


def _sentence(text: str) -> str:
    text = text.strip()
    return text[0].upper() + text[1:] + ("" if text.endswith((".", "!", "?")) else ".")


def _rows(synsets: list[Synset]) -> list[dict]:
    rows: list[dict] = []
    defined: set[str] = set()
    used: set[str] = set()  # one question per word and form: one answer to learn for it
    for synset in synsets:
        word = _clean_word(synset.words[0])
        # a word's first sense only: its most common one, and one answer per question
        if word and word not in defined and synset.definition and len(synset.definition.split()) <= 20:
            defined.add(word)
            meaning = f"to {synset.definition}" if synset.pos == "verb" else synset.definition
            rows.append({"kind": "definition", "instruction": f"what does the word {word} mean", "input": "",
                         "output": f"{word.capitalize()} means {meaning.rstrip('.')}."})
        for example in synset.examples:
            if (word and word not in used and re.search(rf"\b{word}\b", example) and 4 <= len(example.split()) <= 20
                    and part_of(" ".join(example.split())) == "estimate"):
                used.add(word)
                rows.append({"kind": "usage", "instruction": f"use the word {word} in a sentence", "input": "",
                             "output": _sentence(example)})
                break
    return rows


def _words(row: dict) -> set[str]:
    return set(_TOKEN_RE.findall(f"{row['instruction']} {row['output']}".lower())) - STOPWORDS


def wordnet_instructions(n_rows: int, seed: int = 0, exclude: set[str] = frozenset(),
                         wordnet_dir: Path = WORDNET_DIR) -> list[dict]:
    """``n_rows`` rows (Alpaca fields only), an equal share of each kind where there are enough, drawn with ``seed``;
    no row shares a word with ``exclude`` (function words aside)."""
    exclude = {w.lower() for w in exclude} - STOPWORDS
    by_kind: dict[str, list[dict]] = {kind: [] for kind in KINDS}
    seen: set[tuple[str, str]] = set()
    for row in _rows(read_synsets(wordnet_dir)):
        key = (row["instruction"], row["output"])
        if key not in seen and not (_words(row) & exclude):
            seen.add(key)
            by_kind[row["kind"]].append(row)
    available = sum(len(rows) for rows in by_kind.values())
    if n_rows > available:
        raise DuetError(f"WordNet gives {available} instruction rows here, fewer than the {n_rows} asked for")
    rng = random.Random(seed)
    chosen: list[dict] = []
    remaining = n_rows
    for i, kind in enumerate(sorted(by_kind, key=lambda k: len(by_kind[k]))):  # the scarcest kind first
        share = min(len(by_kind[kind]), remaining // (len(KINDS) - i))
        chosen += rng.sample(by_kind[kind], share)
        remaining -= share
    rng.shuffle(chosen)
    return [{"instruction": r["instruction"], "input": r["input"], "output": r["output"]} for r in chosen]


def request_words(requests: list[dict]) -> set[str]:
    """The words of evaluation requests and of their keywords (function words aside): what no row may hold."""
    words: set[str] = set()
    for request in requests:
        words |= set(_TOKEN_RE.findall(request["request"].lower()))
        words |= {w.lower() for group in request.get("keywords", []) for w in group}
    return words - STOPWORDS
