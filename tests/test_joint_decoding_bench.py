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
                                "spoken_share": 0.25, "ctc_candidates": 4}))
    assert bench.saved_weights(path) == JointWeights(ctc=0.7, lm=0.0, token_bonus=3, whisper=0.75,
                                                     whisper_spoken=0.25, whisper_sure=-0.4, ctc_candidates=4)


def test_weights_of_a_decoding_that_is_not_joint_is_one_error_naming_the_file(bench, tmp_path):
    path = tmp_path / "decoding.json"
    path.write_text(json.dumps({"strategy": "greedy"}))
    with pytest.raises(DuetError, match=r"--weights-of .*decoding.json: not a joint decoding \(strategy 'greedy'\)"):
        bench.saved_weights(path)


def test_the_dev_error_is_a_geometric_mean_that_a_perfect_group_does_not_zero(bench):
    assert bench.geometric_mean([0.04, 0.25]) == pytest.approx(0.1)
    assert bench.geometric_mean([0.0, 0.25]) > 0
    assert bench.geometric_mean([0.0, 0.25]) < bench.geometric_mean([0.0, 0.5])
