"""Whether the recogniser heard an utterance well enough to answer it: the one definition of an utterance's
confidence, and the threshold below which the pipeline, the server and the page say "not understood".

An utterance's confidence is the **mean of its word confidences** (``duet.asr.words``: NeMo's ``max_prob``
measure, each word the least sure of the frames that emit its tokens; under beam search + LM the force-aligned
token's, so a word the LM wrote against the acoustics reads unsure). The mean, not the minimum, because each word
is already its own worst frame: the minimum over words would throw away a request whose one unsure word is a
name or a number that the language model can still answer around, while speech the recogniser does not know
(people, for the demo's models) leaves most of its words unsure. Every word counts the same, short or long: a
long word is not more certain for being long. ``bench/confidence_threshold.py`` prints both aggregations: at the
threshold where each wrongly flags about 9 % of what the bundled base heard right, the mean flags 70 % of what it
heard badly and the minimum 64 %; under the demo model's beam search + LM the minimum is unusable (a single
force-aligned LM token reads 0: 71 % of the rightly heard flagged already at 0.05).

A word outside the English lexicon (``duet.data.lexicon``: WordNet's words and the sample's) counts as confidence 0,
however sure its frames were: a recogniser that mishears spells what it heard ("prantin then for oura porpes"),
often surely, and under greedy decoding such words are the plainest sign of it (RESULTS.md "Low-confidence turns"
compares the flags with and without this). Under beam search + LM the LM writes real words, so there it matters
less. A user's own names outside the lexicon lower the confidence too: a threshold is chosen on held-in speech.

A transcript without word confidences (cache-aware streaming gives none) has no confidence: it is answered
unchecked, and its JSON says ``"confidence": null``.
"""

from __future__ import annotations

from typing import Collection, Sequence

from duet.asr.words import Word
from duet.errors import DuetError
from duet.data.lexicon import english_words, words_of

#: What the pipeline answers instead of the language model's reply when it did not understand.
NOT_UNDERSTOOD_REPLY = "Sorry, I didn't catch that."

#: The utterance confidence below which a transcript counts as not understood (0 turns the check off), for a model
#: whose decoding file names none (the demo's does: ``duet.demo.stages.DEMO_MIN_CONFIDENCE``; so does the Whisper base's
#: samples/checkpoints/whisper_tiny_ctc.decoding.json, chosen by the same rule on the same held-in data,
#: RESULTS.md "Low-confidence turns"). Chosen by ``bench/confidence_threshold.py`` for the FastConformer base
#: checkpoint (samples/checkpoints/fastconformer_tiny_base.nemo, greedy) on held-in data: the sample's dev-clean
#: (60 utterances) and the 8 dev speakers of speechocean762/train (160): the highest threshold that flags at most
#: 10 % of the utterances it heard right (WER <= 0.25; 85 of the 220). At 0.55 it flags 9.4 % of those and 65.2 % of
#: the badly heard (0.60: 15.3 % and 77.8 %). For this model the lexicon check does not help: without it 0.65 flags
#: 9.4 % and 70.4 %. Held out, evaluation only: 78.0 % of speechocean762/test, 99.3 % of read_sentences and 93.0 % of
#: common_voice flagged. Re-choose it there when the bundled checkpoint changes.
DEFAULT_MIN_CONFIDENCE = 0.55


class ConfidenceSettingError(DuetError, ValueError):
    """A threshold outside 0..1, named by its command-line flag."""


def check_min_confidence(value: float, flag: str = "--min-confidence") -> float:
    """``value`` if it is a usable threshold (0 = off .. 1), else a ConfidenceSettingError naming ``flag``."""
    if not 0.0 <= value <= 1.0:
        raise ConfidenceSettingError(f"{flag} must be in 0..1 (0 turns the check off), got {value:g}")
    return value


#: ``utterance_confidence``'s lexicon argument meaning "duet.data.lexicon's English words"
ENGLISH = "english"


def utterance_confidence(words: Sequence[Word] | None, lexicon: Collection[str] | str | None = ENGLISH) -> float | None:
    """The mean confidence of ``words`` (module doc), a word outside ``lexicon`` counting 0 (None: every word
    counts as heard), rounded to 4 places; None without words."""
    if not words:
        return None
    known = english_words() if lexicon == ENGLISH else lexicon
    def counted(word: Word) -> float:
        return word.confidence if known is None or all(w in known for w in words_of(word.word)) else 0.0
    return round(sum(counted(w) for w in words) / len(words), 4)


def is_understood(confidence: float | None, min_confidence: float) -> bool:
    """Whether a transcript of ``confidence`` may go to the language model: at or above ``min_confidence``, or
    unmeasured (None), or the check off (``min_confidence`` 0)."""
    return confidence is None or min_confidence <= 0 or confidence >= min_confidence
