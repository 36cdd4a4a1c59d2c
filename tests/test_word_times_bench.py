"""bench/word_times.py: reference spans of words synthesised one by one, matching words, and the summary."""

import numpy as np
import pytest
import soundfile as sf

from tests.script_helpers import load_script


@pytest.fixture(scope="module")
def bench(repo_root):
    return load_script(repo_root / "bench" / "word_times.py")


def test_only_words_spelt_alike_are_timed_in_order(bench):
    W = bench.TimedWord
    reference = [W("The", 0.3, 0.5), W("well-known", 0.7, 1.2), W("cat", 1.5, 1.9), W("sat.", 2.1, 2.4)]
    hypothesis = [W("the", 0.25, 0.55), W("well", 0.65, 0.9), W("known", 0.9, 1.6), W("hat", 1.4, 2.0),
                  W("sat", 2.05, 2.45)]
    pairs = bench.timing_errors(reference, hypothesis)
    assert [(r.word, h.word) for r, h in pairs] == [("the", "the"), ("well", "well"), ("known", "known"), ("sat", "sat")]
    # a hyphenated reference word splits into its parts, each timed as the whole word's span
    assert pairs[1][0] == W("well", 0.7, 1.2) and pairs[2][0] == W("known", 0.7, 1.2)
    summary = bench.summarise(pairs, reference_words=5)
    assert summary["matched"] == 4 and summary["reference_words"] == 5
    # starts -0.05, -0.05, +0.2, -0.05; ends +0.05, -0.3, +0.4, +0.05
    assert summary["start_median_abs_s"] == pytest.approx(0.05) and summary["start_mean_s"] == pytest.approx(0.012, abs=1e-3)
    assert summary["start_within_0.1"] == pytest.approx(0.75) and summary["start_within_0.25"] == 1.0
    assert summary["end_within_0.1"] == pytest.approx(0.5) and summary["end_within_0.25"] == pytest.approx(0.5)
    assert summary["end_mean_s"] == pytest.approx(0.05)
    assert summary["middle_inside"] == pytest.approx(0.75)  # "known" (middle 1.25 s) is past 0.7-1.2 s
    assert bench.summarise([], 3) == {"matched": 0, "reference_words": 3}


@pytest.mark.integration  # synthesises speech with the held-out TTS voices (tools/setup.sh installs them)
def test_each_word_lies_where_the_reference_says(bench, tmp_path):
    utterances = bench.build_utterances(tmp_path, count=2, min_words=3, max_words=5, min_pause=0.2, max_pause=0.3,
                                        seed=1)
    assert len(utterances) == 2
    for path, words in utterances:
        audio, rate = sf.read(path, dtype="float32")
        assert rate == 16000 and 3 <= len(words) <= 5
        spans = [(round(w.start * rate), round(w.end * rate)) for w in words]
        slack = 10  # samples: the times are rounded to the millisecond (16 samples)
        for (_, end), (start, _) in zip(spans, spans[1:]):
            assert np.all(audio[end + slack: start - slack] == 0)  # the pauses are silence, at least 0.2 s of it
            assert start - end >= 0.2 * rate - slack
        for start, end in spans:  # each word begins and ends with sound (trimmed at -50 dB, then cut exactly)
            assert np.abs(audio[start: start + 80]).max() > 0 and np.abs(audio[end - 80: end]).max() > 0
        assert np.all(audio[: spans[0][0] - slack] == 0) and np.all(audio[spans[-1][1] + slack:] == 0)


def test_bad_options_are_one_line_errors(bench, tmp_path, capsys):
    assert bench.main(["--model", str(tmp_path / "none.nemo"), "--out", str(tmp_path)]) == 2
    assert "model file not found" in capsys.readouterr().err
    model = tmp_path / "m.nemo"
    model.write_bytes(b"x")
    assert bench.main(["--model", str(model), "--min-pause", "0.5", "--max-pause", "0.1", "--out", str(tmp_path)]) == 2
    assert "--min-pause 0.5 / --max-pause 0.1" in capsys.readouterr().err
    assert not (tmp_path / "word_times.json").exists()


@pytest.mark.integration  # synthesises speech with the held-out TTS voices
def test_an_utterance_past_whispers_window_or_too_few_sentences_is_named(bench, tmp_path):
    from duet.errors import DuetError

    with pytest.raises(DuetError, match="asked for 1000000 utterances"):
        bench.build_utterances(tmp_path, count=10**6, min_words=4, max_words=12, min_pause=0.1, max_pause=0.2, seed=0)
    with pytest.raises(DuetError, match="over Whisper's 30 s: lower --max-words or --max-pause"):
        bench.build_utterances(tmp_path, count=1, min_words=5, max_words=5, min_pause=9, max_pause=9, seed=0)
    assert not list(tmp_path.iterdir())  # nothing half-made is left
