"""Whole numbers spelt out as a reader says them: the speech corpus's spelling, which the language-model
metrics also need (a request says "ninety", the answer writes "90"). ``duet.synth.corpus_text`` builds its
sentences with it."""

from __future__ import annotations

_ONES = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
    "sixteen seventeen eighteen nineteen"
).split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()


def number_to_words(n: int) -> str:
    """Spell a whole number 0 <= n < 1,000,000 the way a reader says it ("three hundred and five")."""
    if not 0 <= n < 1_000_000:
        raise ValueError(f"number_to_words supports 0..999999, got {n}")
    if n < 20:
        return _ONES[n]
    if n < 100:
        tens, ones = divmod(n, 10)
        return _TENS[tens] + ("" if ones == 0 else " " + _ONES[ones])
    if n < 1000:
        hundreds, rest = divmod(n, 100)
        return _ONES[hundreds] + " hundred" + ("" if rest == 0 else " and " + number_to_words(rest))
    thousands, rest = divmod(n, 1000)
    words = number_to_words(thousands) + " thousand"
    if rest == 0:
        return words
    return words + (" and " if rest < 100 else " ") + number_to_words(rest)
