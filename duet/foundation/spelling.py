"""Numbers spelt out as people say them: the one home of the project's number spelling.

``num2words`` (its English cardinal, year and ordinal modes) does the spelling; what lives here is which reading a
written number gets. :func:`spell_numbers` is what the pseudo-labeller's transcripts, the manifests' and the LM's text
and the WER scorer read numbers through (``duet.text.normalize_spoken``); the speech corpus builds its sentences from
:func:`number_to_words`, :func:`year_to_words` and :func:`ordinal_to_words` (hyphens and commas of ``num2words``
become spaces: "one thousand two hundred and fifty five").

Readings (checked on the 56 digit strings of speechocean762/train that Whisper tiny.en wrote in digits, RESULTS.md
"Numbers as people say them"):

- years: a four-digit number from 1100 to 2099 written without a comma ("in 1455" -> "fourteen fifty five", "1990s"
  -> "nineteen nineties"); with a comma it is an amount ("1,455" -> "one thousand four hundred and fifty five");
- times: "7:30" -> "seven thirty", "7:05" -> "seven oh five", "7:00" -> "seven o'clock";
- ordinals: "3rd" -> "third", "21st" -> "twenty first";
- money: "$5" -> "five dollars", "$5.50" -> "five dollars and fifty cents", "£1" -> "one pound", "$2 million" ->
  "two million dollars";
- percentages and decimals: "50%" -> "fifty percent", "3.14" -> "three point one four";
- digit strings, read digit by digit: a number with a leading zero ("007"), five or more digits without commas,
  and any number of three or more digits in a transcript that holds nothing but numbers (a code read out: "7412" ->
  "seven four one two", as the speakers of speechocean762 read them);
- every other whole number by its value ("305" -> "three hundred and five").
"""

from __future__ import annotations

import re

from num2words import num2words

#: Currency symbols and what a reader says: (unit, units, hundredth, hundredths).
CURRENCIES = {"$": ("dollar", "dollars", "cent", "cents"), "£": ("pound", "pounds", "penny", "pence"),
              "€": ("euro", "euros", "cent", "cents")}
_DIGIT_WORDS = "zero one two three four five six seven eight nine".split()
_SCALE = r"(?:\s+(?P<scale>thousand|million|billion|trillion)\b)?"
_MONEY = re.compile(r"(?P<symbol>[$£€])\s?(?P<whole>\d{1,3}(?:,\d{3})+|\d+)(?:\.(?P<cents>\d{2}))?(?!\d)" + _SCALE,
                    re.IGNORECASE)
_TIME = re.compile(r"\b(?P<hour>[01]?\d|2[0-3]):(?P<minute>[0-5]\d)\b")
_ORDINAL = re.compile(r"\b(?P<n>\d+)(?P<suffix>st|nd|rd|th)\b", re.IGNORECASE)
_DECADE = re.compile(r"\b(?P<year>1[1-9]\d0|20\d0)'?s\b")
_PERCENT = re.compile(r"(?P<n>\d+(?:\.\d+)?)\s?%")
_DECIMAL = re.compile(r"(?<![\d.])(?P<whole>\d+)\.(?P<fraction>\d+)(?![\d.])")
_GROUPED = re.compile(r"(?<![\d,.])\d{1,3}(?:,\d{3})+(?![\d,]|\.\d)")
_NUMBER = re.compile(r"\d+")
_LETTER = re.compile(r"[^\W\d_]")


def _words(spelt: str) -> str:
    """num2words' spelling as plain words: its hyphens and commas become spaces."""
    return " ".join(spelt.replace("-", " ").replace(",", " ").split())


def number_to_words(n: int) -> str:
    """A whole number 0 <= n < 1,000,000 by its value ("three hundred and five")."""
    if not 0 <= n < 1_000_000:
        raise ValueError(f"number_to_words supports 0..999999, got {n}")
    return _words(num2words(n))


def year_to_words(n: int) -> str:
    """A year as people say it: 1455 -> "fourteen fifty five", 1905 -> "nineteen oh five", 2004 -> "two thousand
    and four"."""
    return _words(num2words(n, to="year"))


def ordinal_to_words(n: int) -> str:
    """An ordinal 1 <= n ("twenty first", "thirtieth")."""
    if n < 1:
        raise ValueError(f"ordinal_to_words needs n >= 1, got {n}")
    return _words(num2words(n, to="ordinal"))


def digits_to_words(digits: str) -> str:
    """A digit string read digit by digit: "007" -> "zero zero seven"."""
    return " ".join(_DIGIT_WORDS[int(d)] for d in digits)


def _cardinal(text: str) -> str:
    return _words(num2words(int(text.replace(",", ""))))


def _money(match: re.Match) -> str:
    unit, units, hundredth, hundredths = CURRENCIES[match["symbol"]]
    whole = int(match["whole"].replace(",", ""))
    if match["scale"]:  # "$2 million": the scale belongs to the amount
        return f" {_cardinal(match['whole'])} {match['scale'].lower()} {units} "
    spoken = f"{_cardinal(match['whole'])} {unit if whole == 1 else units}"
    cents = int(match["cents"] or 0)
    if cents:
        spoken += f" and {_cardinal(str(cents))} {hundredth if cents == 1 else hundredths}"
    return f" {spoken} "


def _time(match: re.Match) -> str:
    hour, minute = int(match["hour"]), match["minute"]
    if minute == "00":
        return f" {_cardinal(str(hour))} o'clock "
    return f" {_cardinal(str(hour))} {'oh ' if minute[0] == '0' else ''}{_cardinal(minute)} "


def _decade(match: re.Match) -> str:
    year = year_to_words(int(match["year"]))
    return f" {year[:-1] + 'ies' if year.endswith('y') else year + 's'} "


def _decimal(match: re.Match) -> str:
    return f" {_cardinal(match['whole'])} point {digits_to_words(match['fraction'])} "


def _whole(match: re.Match, numbers_only: bool) -> str:
    digits = match.group()
    n = int(digits)
    if (len(digits) > 1 and digits.startswith("0")) or len(digits) >= 5 or (numbers_only and len(digits) >= 3):
        return f" {digits_to_words(digits)} "
    if len(digits) == 4 and 1100 <= n < 2100:
        return f" {year_to_words(n)} "
    return f" {_cardinal(digits)} "


def spell_numbers(text: str) -> str:
    """``text`` with every number written in digits spelt the way it is read (the module's rules); the rest as it
    was. Cheap on text without digits (returned as is)."""
    if not any(c.isdigit() for c in text):
        return text
    numbers_only = _LETTER.search(text) is None
    text = _MONEY.sub(_money, text)
    text = _TIME.sub(_time, text)
    text = _ORDINAL.sub(lambda m: f" {ordinal_to_words(int(m['n']))} ", text)
    text = _DECADE.sub(_decade, text)
    text = _PERCENT.sub(lambda m: f" {_DECIMAL.sub(_decimal, m['n']) if '.' in m['n'] else _cardinal(m['n'])} percent ",
                        text)
    text = _GROUPED.sub(lambda m: f" {_cardinal(m.group())} ", text)
    text = _DECIMAL.sub(_decimal, text)
    text = _NUMBER.sub(lambda m: _whole(m, numbers_only), text)
    return " ".join(text.split())
