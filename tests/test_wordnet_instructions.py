"""Alpaca-format instruction rows from WordNet (duet/synth/wordnet_instructions.py, tools/make_english_text.py
--instructions): what each row asks and answers, the words no row may hold, the held-out sentences never used."""

import json
import re
import subprocess

import pytest

from duet.english_text import part_of
from duet.errors import DuetError
from duet.synth.wordnet_instructions import request_words, wordnet_instructions

HEADER = "  1 This software and database is being provided to you, the LICENSEE, by\n"


def write_wordnet(folder, lines_by_file):
    folder.mkdir()
    for name in ("data.noun", "data.verb", "data.adj"):
        (folder / name).write_text(HEADER + "".join(line + "  \n" for line in lines_by_file.get(name, [])))
    return folder


def estimate_sentence(template: str) -> str:
    """The first numbered variant of ``template`` that falls in the estimate part (the rows' only source)."""
    return next(s for s in (template.format(i) for i in range(100)) if part_of(s) == "estimate")


def held_out_sentence(template: str) -> str:
    return next(s for s in (template.format(i) for i in range(100)) if part_of(s) != "estimate")


@pytest.fixture
def wordnet(tmp_path):
    kept = estimate_sentence("the kettle boiled over {} times")
    held = held_out_sentence("a lamp lit the room {} times")
    return write_wordnet(tmp_path / "wordnet", {
        "data.noun": [
            f'00000001 06 n 01 kettle 0 000 | a metal pot for stewing or boiling; usually has a lid; "{kept}"',
            f'00000002 06 n 02 lamp 0 lantern 0 000 | a piece of furniture holding one or more bulbs; "{held}"',
            '00000003 05 n 01 giraffe 0 000 | tallest living quadruped',
            '00000004 06 n 01 kettle 1 000 | the quantity a kettle will hold',  # a second sense: not asked again
        ],
        "data.verb": ['00000005 30 v 01 stew 0 000 | cook slowly and for a long time in liquid'],
        "data.adj": ["00000006 00 a 01 tepid 0 000 | moderately warm"],
    }), kept


def test_rows_define_a_words_first_sense_and_use_it_in_an_estimate_sentence(wordnet):
    folder, kept = wordnet
    rows = wordnet_instructions(6, wordnet_dir=folder)
    pairs = {(r["instruction"], r["output"]) for r in rows}
    assert pairs == {
        ("what does the word kettle mean", "Kettle means a metal pot for stewing or boiling; usually has a lid."),
        ("what does the word lamp mean", "Lamp means a piece of furniture holding one or more bulbs."),
        ("what does the word giraffe mean", "Giraffe means tallest living quadruped."),
        ("what does the word stew mean", "Stew means to cook slowly and for a long time in liquid."),
        ("what does the word tepid mean", "Tepid means moderately warm."),
        ("use the word kettle in a sentence", kept[0].upper() + kept[1:] + "."),
    }  # the lamp's example is in a held-out tenth: never a row
    assert all(set(r) == {"instruction", "input", "output"} and r["input"] == "" for r in rows)
    assert wordnet_instructions(3, seed=1, wordnet_dir=folder) == wordnet_instructions(3, seed=1, wordnet_dir=folder)


def test_no_row_holds_an_excluded_word_and_asking_too_many_is_named(wordnet):
    folder, _ = wordnet
    requests = [{"request": "what is the tallest animal in the world", "keywords": [["giraffe", "giraffes"]]}]
    excluded = request_words(requests)
    assert {"tallest", "animal", "world", "giraffe"} <= excluded and not {"what", "is", "the"} & excluded
    rows = wordnet_instructions(5, wordnet_dir=folder, exclude=excluded)
    assert not any("giraffe" in r["instruction"] + r["output"] or "tallest" in r["output"] for r in rows)
    with pytest.raises(DuetError, match="gives 5 instruction rows here, fewer than the 6 asked for"):
        wordnet_instructions(6, wordnet_dir=folder, exclude=excluded)
    with pytest.raises(DuetError, match="apt-get install wordnet-base"):
        wordnet_instructions(1, wordnet_dir=folder.parent / "none")


@pytest.mark.integration  # the tool on the installed WordNet
def test_tool_writes_rows_that_answer_no_open_request(tmp_path, python, repo_root):
    out = tmp_path / "rows.json"
    result = subprocess.run([python, str(repo_root / "tools" / "make_english_text.py"), "--instructions", "300",
                             "--out", str(out)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    rows = json.loads(out.read_text())
    requests = json.loads((repo_root / "samples" / "open_requests.json").read_text())["requests"]
    excluded = request_words(requests)
    assert len(rows) == 300 and len({r["instruction"] for r in rows}) == 300
    for row in rows:
        assert not set(re.findall(r"[a-z0-9]+", (row["instruction"] + " " + row["output"]).lower())) & excluded, row
