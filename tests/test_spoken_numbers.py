"""Numbers as people say them (duet/foundation/spelling.py through duet.text.normalize_spoken): the one normaliser of
labels, manifests, LM text and scoring."""

import pytest

from duet.asr.scoring import score
from duet.foundation.spelling import number_to_words, ordinal_to_words, year_to_words
from duet.data.manifest import normalize_transcript
from duet.text import normalize_spoken

CASES = {
    "years": [
        ("Gutenberg printed it in 1455.", "gutenberg printed it in fourteen fifty five"),
        ("in 1905 and 2004", "in nineteen oh five and two thousand and four"),
        ("back in 2010", "back in twenty ten"),
        ("the 1990s", "the nineteen nineties"),
        ("it cost 1,455 dollars", "it cost one thousand four hundred and fifty five dollars"),  # a comma: an amount
    ],
    "times": [
        ("Meet me at 7:30.", "meet me at seven thirty"),
        ("at 7:05 pm", "at seven oh five pm"),
        ("at 12:00", "at twelve o'clock"),
    ],
    "ordinals": [
        ("the 3rd of May", "the third of may"),
        ("her 21st birthday", "her twenty first birthday"),
        ("the 100th time", "the one hundredth time"),
        ("THE 2ND FLOOR", "the second floor"),
    ],
    "money": [
        ("It costs $5.", "it costs five dollars"),
        ("$1 each", "one dollar each"),
        ("$5.50 in all", "five dollars and fifty cents in all"),
        ("£20 or €3", "twenty pounds or three euros"),
        ("$2 million", "two million dollars"),
        ("$1,250", "one thousand two hundred and fifty dollars"),
    ],
    "digit strings and plain numbers": [
        ("Call 007 now", "call zero zero seven now"),  # a leading zero: a code
        ("my number is 5551234", "my number is five five five one two three four"),  # five digits or more
        ("7412", "seven four one two"),  # nothing but numbers: read out digit by digit
        ("6, 1, 7, 6", "six one seven six"),
        ("1-1-0-8", "one one zero eight"),
        ("chapter 22 has 305 pages", "chapter twenty two has three hundred and five pages"),  # in words: by value
        ("50% of 3.14", "fifty percent of three point one four"),
    ],
}


@pytest.mark.parametrize("kind, written, said", [(kind, w, s) for kind, cases in CASES.items() for w, s in cases],
                         ids=lambda value: value if value in CASES else "")
def test_numbers_are_spelt_as_said(kind, written, said):
    assert normalize_spoken(written) == said, kind


def test_text_without_digits_is_only_normalised():
    assert normalize_spoken("Don't STOP -- well-known") == "don't stop well known"


def test_the_corpus_spellings_come_from_the_same_home():
    assert number_to_words(108) == "one hundred and eight" and number_to_words(2001) == "two thousand and one"
    assert year_to_words(1455) == "fourteen fifty five" and ordinal_to_words(30) == "thirtieth"
    with pytest.raises(ValueError):
        number_to_words(1_000_000)


def test_manifests_and_scoring_read_numbers_the_same_way():
    assert normalize_transcript("BORN IN 1455") == "born in fourteen fifty five"
    scored = score(["a"], ["born in fourteen fifty five"], ["Born in 1455."], [1.0])
    assert scored.summary["wer"] == 0.0
    wrong = score(["a"], ["born in fourteen fifty five"], ["born in 1456"], [1.0])
    assert wrong.summary["wer"] == pytest.approx(1 / 5)
