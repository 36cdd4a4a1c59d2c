"""Label-synchronous joint decoding (duet.asr.decoding.synchronous): the CTC prefix scores against every path
counted by hand, and the search steered by them on a constructed case (a stand-in decoder, no weights read)."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F

from duet.asr.decoding.synchronous import CtcPrefixScores, WhisperVocabulary, guided_beam_search
from duet.asr.whisper_gpt2 import END_OF_TEXT

BLANK = 0


def collapse(path):
    """A CTC path's labels: repeats merged, blanks dropped."""
    return tuple(label for k, label in enumerate(path) if label != BLANK and (k == 0 or path[k - 1] != label))


def test_prefix_and_full_probabilities_equal_the_sums_over_every_path():
    frames, labels = 5, 3
    log_probs = torch.randn(frames, labels, generator=torch.Generator().manual_seed(0)).log_softmax(-1).double()
    by_output: dict[tuple, float] = {}
    for path in itertools.product(range(labels), repeat=frames):
        p = math.exp(sum(float(log_probs[t, label]) for t, label in enumerate(path)))
        by_output[collapse(path)] = by_output.get(collapse(path), 0.0) + p
    scores = CtcPrefixScores(log_probs, BLANK)
    for tokens in [(1,), (2,), (1, 1), (1, 2), (2, 1, 2), (1, 2, 1)]:
        prefix = sum(p for output, p in by_output.items() if output[: len(tokens)] == tokens)
        assert scores.prefix(tokens) == pytest.approx(math.log(prefix), abs=1e-6)
        assert scores.full(tokens) == pytest.approx(math.log(by_output[tokens]), abs=1e-6)
        loss = F.ctc_loss(log_probs[:, None], torch.tensor([tokens]), torch.tensor([frames]),
                          torch.tensor([len(tokens)]), blank=BLANK, reduction="sum")
        assert scores.full(tokens) == pytest.approx(-float(loss), abs=1e-6)
    assert scores.full(()) == pytest.approx(math.log(by_output[()]), abs=1e-6)
    assert scores.prefix(()) == 0.0


# A stand-in Whisper vocabulary: the words " a" and " b", "c" continuing a word
A, B, C, SPACE = 1, 2, 3, 4
TEXT = {A: " a", B: " b", C: "c", SPACE: " "}


class StubDecoder:
    """Prefers " b" to " a" as the first word, then the end of the transcript."""

    def cache_for(self, encoding):
        return StubCache(0)

    def step(self, ids, cache):
        rows = ids.shape[0]
        p = torch.full((rows, END_OF_TEXT + 1), 1e-6)
        if cache.length == 0:
            p[:, B], p[:, A] = 0.6, 0.4
        else:
            p[:, END_OF_TEXT] = 0.9
        return p.log().log_softmax(-1), StubCache(cache.length + ids.shape[1])


class StubCache:
    def __init__(self, length):
        self.length = length

    def rows(self, index):
        return self


def vocabulary():
    size = END_OF_TEXT + 1
    return WhisperVocabulary(suppressed=torch.tensor([i not in (*TEXT, END_OF_TEXT) for i in range(size)]),
                             blank_start=(SPACE, END_OF_TEXT),
                             decode=lambda ids: "".join(TEXT[i] for i in ids))


def spell(text):
    """The CTC stand-in's tokens: a letter each (blank 0, a 1, b 2, c 3)."""
    return [{"a": 1, "b": 2, "c": 3}[ch] for ch in text.replace(" ", "")]


def test_the_ctc_prefix_score_steers_whisper_search_to_the_word_the_audio_spells():
    p = torch.full((4, 4), 0.02)
    p[:, BLANK] = 0.94
    p[1, 1], p[1, BLANK] = 0.94, 0.02  # the audio spells "a"
    ctc = CtcPrefixScores(p.log(), BLANK)
    search = lambda weight: guided_beam_search(StubDecoder(), None, ctc, spell, vocabulary(), beam_size=2,  # noqa: E731
                                               ctc_weight=weight, max_tokens=4)
    assert search(0.0)[0] == "b"  # Whisper alone
    assert search(0.5)[0] == "a"
    assert set(search(0.5)) == {"a", "b"}
