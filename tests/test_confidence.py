"""duet/asr/confidence.py: the utterance confidence and the low-confidence rule."""

from __future__ import annotations

import pytest

from duet.asr.words import Word
from duet.asr.confidence import ConfidenceSettingError, check_min_confidence, is_understood, utterance_confidence
from duet.data.lexicon import english_words

LEXICON = frozenset({"turn", "on", "the", "lights", "don't"})


def words(*confidences: float, texts: tuple[str, ...] = ()) -> list[Word]:
    texts = texts or tuple(f"w{i}" for i in range(len(confidences)))
    return [Word(text, i * 0.3, (i + 1) * 0.3, c) for i, (text, c) in enumerate(zip(texts, confidences))]


def test_utterance_confidence_is_the_mean_of_its_word_confidences():
    assert utterance_confidence(words(0.9, 0.6, 0.3), lexicon=None) == 0.6
    # one unsure word among sure ones does not sink the utterance as a minimum would
    assert utterance_confidence(words(1.0, 1.0, 1.0, 0.2), lexicon=None) == 0.8
    assert utterance_confidence(words(0.12345678), lexicon=None) == 0.1235
    assert utterance_confidence([]) is None and utterance_confidence(None) is None


def test_a_word_outside_the_lexicon_counts_as_not_heard():
    sure = (0.9, 0.9, 0.9, 0.9)
    assert utterance_confidence(words(*sure, texts=("turn", "on", "the", "lights")), lexicon=LEXICON) == 0.9
    # the recogniser spelled what it heard: sure frames, no English word
    assert utterance_confidence(words(*sure, texts=("turn", "onn", "the", "laytz")), lexicon=LEXICON) == 0.45
    # case and an apostrophe inside a word do not make it unknown
    assert utterance_confidence(words(0.8, 0.6, texts=("Don't", "TURN")), lexicon=LEXICON) == 0.7


def test_the_pipeline_lexicon_knows_english_and_not_misspellings():
    known = english_words()
    if known is None:
        pytest.skip("WordNet is not installed (apt-get install wordnet-base)")
    heard = words(0.9, 0.9, 0.9, 0.9, 0.9, texts=("what", "is", "the", "plural", "of"))
    assert utterance_confidence(heard) == 0.9  # function words and inflections are in it
    spelled = words(0.9, 0.9, 0.9, texts=("prantin", "oura", "porpes"))
    assert utterance_confidence(spelled) == 0.0


@pytest.mark.parametrize("confidence, threshold, understood", [
    (0.49, 0.5, False),   # below: not understood
    (0.5, 0.5, True),     # at the threshold: understood
    (0.9, 0.5, True),
    (0.01, 0.0, True),    # 0 turns the check off
    (None, 0.9, True),    # not measured (streaming): never flagged
])
def test_the_low_confidence_rule(confidence, threshold, understood):
    assert is_understood(confidence, threshold) is understood


def test_a_threshold_outside_0_1_is_named_by_its_flag():
    assert check_min_confidence(0.0) == 0.0 and check_min_confidence(1.0) == 1.0
    with pytest.raises(ConfidenceSettingError, match=r"--min-confidence must be in 0..1 .*, got 1.2"):
        check_min_confidence(1.2)
    with pytest.raises(ConfidenceSettingError, match="min_confidence must be"):
        check_min_confidence(-0.5, "min_confidence")
