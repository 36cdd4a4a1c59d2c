"""The one text normalisation of the project: what the WER scorer compares, what the n-gram LM is trained
on, and what synthesis compares sentences by (held-out checks, exclusion lists).

It lives outside both ``duet.asr`` and ``duet.synth`` so that synthesis can use it without importing
recognition code, and recognition never imports synthesis.
"""

from __future__ import annotations

import re

from duet.foundation.spelling import spell_numbers

# Anything that is neither a word character (Unicode letters, digits, underscore), white space nor an
# apostrophe becomes a space: "well-known" -> "well known", "don't" stays, "10" and "café" stay.
_NOT_KEPT = re.compile(r"[^\w\s']")


def normalize_text(text: str) -> str:
    """Lower case, punctuation except apostrophes replaced by spaces, single spaces.

    Digits and non-ASCII letters are kept: a recogniser that writes "10" for "ten" is wrong, and must not
    be scored as if it had said nothing. (Synthesis used a letters-a-z-only variant that dropped them; its
    inputs are checked to hold no digits or non-ASCII letters before they get here, except Alpaca
    instructions, which it also compares in spelled-out form: see tests/test_text.py.)
    """
    return " ".join(_NOT_KEPT.sub(" ", text.lower()).split())


def normalize_spoken(text: str) -> str:
    """:func:`normalize_text` of ``text`` with its numbers spelt the way they are read ("in 1455" -> "in fourteen
    fifty five", :func:`duet.foundation.spelling.spell_numbers`): the one normaliser of transcripts as speech, for
    labels (pseudo-labels, manifests), the LM's text and scoring."""
    return normalize_text(spell_numbers(text))
