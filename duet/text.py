"""The one text normalisation of the project: what the WER scorer compares, what the n-gram LM is trained
on, and what synthesis compares sentences by (held-out checks, exclusion lists).

It lives outside both ``duet.asr`` and ``duet.synth`` so that synthesis can use it without importing
recognition code, and recognition never imports synthesis.
"""

from __future__ import annotations

import re

from text_to_num import alpha2digit

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


# as _NOT_KEPT, but a colon or point between digits stays ("7:30", "2.5")
_NOT_KEPT_IN_REQUEST = re.compile(r"[^\w\s':.]|(?<!\d)[:.]|[:.](?!\d)")


def request_text(text: str) -> str:
    """A spoken request as the language model is given it, whoever wrote the transcript: lower case, no
    punctuation, numbers in digits ("What is sixty four degrees Celsius?" and "what is 64 degrees celsius" both
    -> "what is 64 degrees celsius"; text2num's ``alpha2digit``, which leaves a lone "one" or "two" a word).

    The recognisers write numbers both ways (the CTC model in words, Whisper in digits, with its casing and
    punctuation), and a model this small copies a digit far better than it turns "seventy seven" into 77 (it wrote
    70). The voice pipeline gives the model this form of its transcript, and the Alpaca sample writes its requests in
    the recogniser's form this way too (``duet.synth.alpaca_sample``), so the model trains on the form it is given
    (RESULTS.md "Requests with numbers in digits")."""
    return " ".join(alpha2digit(" ".join(_NOT_KEPT_IN_REQUEST.sub(" ", text.lower()).split()), "en").split())
