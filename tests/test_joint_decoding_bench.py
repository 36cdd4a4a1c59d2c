"""bench/joint_decoding.py: the weights read from a saved decoding file (--weights-of) and the dev error's mean."""

import json

import pytest

from duet.asr.decoding.joint import JointWeights
from duet.errors import DuetError
from tests.script_helpers import load_script


@pytest.fixture(scope="module")
def bench(repo_root):
    return load_script(repo_root / "bench" / "joint_decoding.py")


def test_weights_of_a_saved_joint_decoding_are_its_judge_weights(bench, tmp_path):
    path = tmp_path / "decoding.json"
    path.write_text(json.dumps({"strategy": "joint", "ctc_weight": 0.7, "token_bonus": 3, "whisper_sure": -0.4,
                                "spoken_share": 0.25, "ctc_candidates": 4, "ctc_spacing": 0}))
    assert bench.saved_weights(path) == JointWeights(ctc=0.7, lm=0.0, token_bonus=3, whisper=0.75,
                                                     whisper_spoken=0.25, whisper_sure=-0.4, ctc_candidates=4,
                                                     ctc_spacing=0)


def test_weights_of_a_decoding_that_is_not_joint_is_one_error_naming_the_file(bench, tmp_path):
    path = tmp_path / "decoding.json"
    path.write_text(json.dumps({"strategy": "greedy"}))
    with pytest.raises(DuetError, match=r"--weights-of .*decoding.json: not a joint decoding \(strategy 'greedy'\)"):
        bench.saved_weights(path)


def test_the_dev_error_is_a_geometric_mean_that_a_perfect_group_does_not_zero(bench):
    assert bench.geometric_mean([0.04, 0.25]) == pytest.approx(0.1)
    assert bench.geometric_mean([0.0, 0.25]) > 0
    assert bench.geometric_mean([0.0, 0.25]) < bench.geometric_mean([0.0, 0.5])


def _judged(text, from_whisper, ctc):
    from duet.asr.decoding.joint import Judged
    return Judged(text, text.lower(), (1,) if text else (), whisper=-1.0, whisper_spoken=-1.0, ctc=ctc, lm=0.0,
                  from_whisper=from_whisper)


def test_a_saved_ctc_candidates_judges_the_beams_first_ones_beside_whisper_and_the_empty_text(bench):
    candidates = [_judged("Whisper", True, -9.0), _judged("beam one", False, -5.0), _judged("beam two", False, -4.0),
                  _judged("", False, -50.0), _judged("beam three", False, -0.5)]
    kept = bench.judged_as_decoded(candidates, 2)
    assert [c.text for c in kept] == ["Whisper", "beam one", "beam two", ""]
    assert bench.judged_as_decoded(candidates, 0) == candidates
    # the best by the CTC score alone differs once the beam's third is not judged, as in the decoding
    weights = JointWeights(ctc=1.0, whisper=0.0)
    from duet.asr.decoding.joint import best_judged
    assert best_judged(candidates, weights).text == "beam three"
    assert best_judged(kept, weights).text == "beam two"


def test_weights_of_an_unreadable_file_names_the_option(bench, tmp_path):
    path = tmp_path / "decoding.json"
    path.write_text("{not json")
    with pytest.raises(DuetError, match=r"^--weights-of .*decoding.json"):
        bench.saved_weights(path)


def test_among_weightings_the_dev_cannot_tell_apart_the_judge_leaves_word_breaks_to_whisper(bench):
    def result(wer, ctc, spacing, sure=-0.3):
        return wer, vars(JointWeights(ctc=ctc, lm=0.2, whisper_sure=sure, ctc_spacing=spacing))
    tied = [result(0.20, 0.5, 1.0), result(0.20, 0.5, 0.0), result(0.19, 0.7, 0.0)]
    assert min(tied, key=bench.leaning_to_whisper) == tied[1]  # least CTC weight first, then the least say in breaks
