"""duet/confidence.py: the utterance confidence and the low-confidence rule."""

from __future__ import annotations

import pytest

from duet.asr.words import Word
from duet.confidence import ConfidenceSettingError, check_min_confidence, is_understood, utterance_confidence


def words(*confidences: float) -> list[Word]:
    return [Word(f"w{i}", i * 0.3, (i + 1) * 0.3, c) for i, c in enumerate(confidences)]


def test_utterance_confidence_is_the_mean_of_its_word_confidences():
    assert utterance_confidence(words(0.9, 0.6, 0.3)) == 0.6
    # one unsure word among sure ones does not sink the utterance as a minimum would
    assert utterance_confidence(words(1.0, 1.0, 1.0, 0.2)) == 0.8
    assert utterance_confidence(words(0.12345678)) == 0.1235
    assert utterance_confidence([]) is None and utterance_confidence(None) is None


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
