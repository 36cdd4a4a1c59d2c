"""The one text normaliser (duet/text.py), as scoring, the n-gram LM and synthesis each need it.

Scoring and synthesis had one each: scoring kept every word character (``[^\\w\\s']`` -> space),
synthesis kept only a-z and apostrophes. They agree on everything synthesis feeds them; they differ on
digits, underscores and non-ASCII letters, which the merged one keeps (the scorer's behaviour)."""

from duet.synth import alpaca_sample, corpus_text, wordnet_text
from duet.synth.corpus import held_out_texts
from duet.text import normalize_text, request_text


def test_punctuation_and_case_go_apostrophes_and_hyphenated_words_stay_words():
    assert normalize_text("  Don't STOP -- well-known, (really)?\tyes!\n") == "don't stop well known really yes"


def test_digits_and_non_ascii_letters_are_kept_for_scoring():
    # a recogniser writing "10" for "ten" made an error; dropping the digits would hide it
    assert normalize_text("Set a timer for 10 minutes.") == "set a timer for 10 minutes"
    assert normalize_text("Café au lait") == "café au lait"


def test_synthesis_outputs_are_unchanged_by_the_merge():
    """Synthesis's old variant dropped digits and non-ASCII letters; its callers never pass them on."""
    assert corpus_text.to_transcript("What's the time in Rome?") == "WHAT'S THE TIME IN ROME"
    assert wordnet_text._to_transcript("a café") is None  # non-ASCII examples are refused before normalising
    assert wordnet_text._to_transcript("he was born in 1990") == "he was born in nineteen ninety"
    held_out = held_out_texts()
    assert all(normalize_text(t) == t for t in held_out)  # no digits or punctuation in held-out sentences
    # Alpaca instructions may hold digits: the digit form never equals a held-out sentence, the spelled-out
    # form (asr_form) is what the held-out check needs, as before
    instruction = "Set a timer for 10 minutes."
    assert normalize_text(instruction) not in held_out
    assert alpaca_sample.asr_form(instruction) == "set a timer for ten minutes"


def test_a_request_reaches_the_language_model_in_one_form_whoever_transcribed_it():
    # the CTC model spells numbers out, Whisper writes digits, casing and punctuation: the model gets one form
    said = "what is sixty four degrees celsius in fahrenheit"
    assert request_text(said) == request_text("What is 64 degrees Celsius in Fahrenheit?") == \
        "what is 64 degrees celsius in fahrenheit"
    assert request_text("add four and seventy five") == "add 4 and 75"
    assert request_text("what is six hundred and twenty three squared") == "what is 623 squared"
    assert request_text("Play some hip-hop music.") == "play some hip hop music"
    # a clock's colon and a decimal point stay; a lone "one" stays a word, as text2num leaves it
    assert request_text("Wake me up at 7:30.") == "wake me up at 7:30"
    assert request_text("convert two point five miles") == "convert 2.5 miles"
    assert request_text("turn the volume up to one") == "turn the volume up to one"

