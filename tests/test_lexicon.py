"""duet/data/lexicon.py: the English words a transcript is checked against, built from WordNet and the sample."""

from __future__ import annotations

from duet.data.lexicon import english_words, words_of

INDEX_LINE = "{lemma} n 1 1 @ 1 0 00000000\n"
LICENCE = "  1 This software and database is being provided to you, the LICENSEE\n"


def fake_wordnet(folder, lemmas=("mouse", "ice_cream", "giraffe"), example='"the mice ran off" '):
    folder.mkdir()
    for part in ("noun", "verb", "adj", "adv"):
        (folder / f"index.{part}").write_text(LICENCE + "".join(INDEX_LINE.format(lemma=l) for l in lemmas))
        (folder / f"data.{part}").write_text(LICENCE + f"00000000 05 n 01 mouse 0 000 | a small rodent; {example}\n")
    return folder


def test_words_of_keeps_letters_and_inner_apostrophes():
    assert words_of("Don't stop, 'Anna' -- 42 times!") == ["don't", "stop", "anna", "times"]


def test_the_lexicon_holds_lemmas_example_words_and_the_sample(tmp_path):
    sample = tmp_path / "sample" / "1" / "2"
    sample.mkdir(parents=True)
    (sample / "1-2.trans.txt").write_text("1-2-0000 TURN ON THE KITCHEN LIGHTS\n")
    words = english_words(fake_wordnet(tmp_path / "wordnet"), tmp_path / "sample")
    assert {"mouse", "giraffe", "mice", "ran", "the", "kitchen", "lights"} <= words
    # a lemma of two words is not one word; the licence header is not English to check against
    assert "ice_cream" not in words and "licensee" not in words


def test_without_wordnet_the_check_is_off_with_one_warning(tmp_path, caplog):
    assert english_words(tmp_path / "no_wordnet", tmp_path) is None
    assert "wordnet-base" in caplog.text
