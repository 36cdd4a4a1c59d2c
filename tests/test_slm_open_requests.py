"""The out-of-template requests (samples/open_requests.json): outside the sample, scored by their keywords."""

import json

import pytest

from duet import SAMPLES_DIR
from slm.metrics import answer_words, is_spoken_request, load_open_requests, names_keywords
from slm.tool_calls import execute_calls


@pytest.fixture(scope="module")
def sample_rows():
    return json.loads((SAMPLES_DIR / "alpaca_sample.json").read_text())


def test_twenty_spoken_requests_none_a_sample_row(sample_rows):
    requests = load_open_requests()
    assert len(requests) == 20
    said = {" ".join(answer_words(row["instruction"])) for row in sample_rows}
    for item in requests:
        assert is_spoken_request({"instruction": item["request"], "input": ""}), item["request"]
        assert " ".join(answer_words(item["request"])) not in said, item["request"]


def test_the_unseen_requests_are_spoken_none_a_sample_row_and_their_keywords_their_own(sample_rows):
    """samples/unseen_requests.json, on which bench/slm_answer_floor.py chooses the floor: written without the
    templates (so many share a template's wording, and a sample answer may name their keywords), none a row of the
    sample, none of the 20 above; an action's keywords are words of the request itself."""
    requests = load_open_requests(SAMPLES_DIR / "unseen_requests.json")
    said = {" ".join(answer_words(row["instruction"])) for row in sample_rows}
    open_requests = {item["request"] for item in load_open_requests()}
    assert {item["kind"] for item in requests} == {"action", "knowledge"}
    for item in requests:
        assert is_spoken_request({"instruction": item["request"], "input": ""}), item["request"]
        assert " ".join(answer_words(item["request"])) not in said and item["request"] not in open_requests
        if item["kind"] == "action":  # what a right answer does: performs it, or declines it (not a skill)
            assert all(set(group) & set(answer_words(item["request"])) for group in item["keywords"]), item
            assert item["expect"] in ("do", "decline"), item


def test_no_sample_answer_is_on_topic_for_any_request(sample_rows):
    """Repeating a memorised answer of the sample cannot count: none names every keyword group of a request, as a
    user reads it (its calls executed: a decline repeats its own request)."""
    shown = [execute_calls(row["output"], request=row["instruction"]).text for row in sample_rows]
    for item in load_open_requests():
        hits = [answer for answer in shown if names_keywords(answer, item["keywords"])]
        assert not hits, (item["request"], hits[:2])


def test_names_keywords_needs_one_word_of_every_group():
    groups = [["wheels"], ["two", "2"]]
    assert names_keywords("A bicycle has 2 wheels.", groups)
    assert names_keywords("Bicycles have TWO wheels!", groups)
    assert not names_keywords("A bicycle has wheels.", groups)         # the number is missing
    assert not names_keywords("A tricycle has three wheels, two at the back", [["wheel"]])  # whole words only


def test_a_request_without_keywords_is_refused(tmp_path):
    path = tmp_path / "requests.json"
    path.write_text(json.dumps({"requests": [{"request": "open the door", "kind": "action", "keywords": [[]]}]}))
    with pytest.raises(ValueError, match="open the door"):
        load_open_requests(path)
