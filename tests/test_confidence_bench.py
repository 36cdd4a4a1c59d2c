"""bench/confidence_threshold.py: the table it chooses a threshold from, the rule, and a run on the micro model."""

import json

import pytest

from duet.asr.confidence import DEFAULT_MIN_CONFIDENCE
from tests.script_helpers import load_script


@pytest.fixture(scope="module")
def bench(repo_root):
    return load_script(repo_root / "bench" / "confidence_threshold.py")


def test_the_threshold_flags_few_rightly_heard_utterances_and_the_table_counts_both_kinds(bench):
    right = [{"wer": 0.0, "confidence": c} for c in (0.42, 0.61, 0.72, 0.8, 0.85, 0.9, 0.9, 0.93, 0.95, 0.97)]
    bad = [{"wer": 0.6, "confidence": c} for c in (0.2, 0.3, 0.45, 0.5, 0.7)] + [{"wer": 1.0, "confidence": None}]
    table = {row["threshold"]: row for row in bench.threshold_table(right + bad, wer_bound=0.25)}
    assert table[0.5]["right_flagged"] == pytest.approx(0.1)       # 0.42
    assert table[0.5]["bad_flagged"] == pytest.approx(4 / 6)       # 0.2, 0.3, 0.45 and the empty transcript
    assert table[0.65]["right_flagged"] == pytest.approx(0.2) and table[0.65]["all_flagged"] == pytest.approx(7 / 16)
    # the highest threshold that flags at most 10 % of the rightly heard
    assert bench.choose(list(table.values()), 0.10) == 0.6
    assert bench.choose(list(table.values()), 0.0) == 0.4
    assert bench.choose([{"threshold": 0.05, "right_flagged": 0.5}], 0.1) is None


def test_a_run_scores_each_utterance_and_writes_its_choice(bench, micro_model_and_manifest, tmp_path, capsys):
    _, nemo_path, manifest, entries = micro_model_and_manifest
    out = tmp_path / "choice.json"
    assert bench.main(["--model", str(nemo_path), "--tune", str(manifest), "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    rows = report["tune"][str(manifest)]
    assert len(rows) == len(entries) and report["decoding"] == "greedy" and report["current"] == DEFAULT_MIN_CONFIDENCE
    assert all(r["confidence"] is None or 0 <= r["confidence"] <= 1 for r in rows)
    # the lexicon check only lowers a confidence: the acoustic one is the same or higher
    assert all(r["confidence"] is None or r["acoustic_confidence"] >= r["confidence"] for r in rows)
    assert [row["threshold"] for row in report["table"]] == bench.THRESHOLDS
    printed = capsys.readouterr().out
    assert "chosen threshold" in printed and "acoustic_confidence at" in printed


def test_greedy_signals_read_the_agreement_of_the_two_transcripts(bench):
    rows = [{"id": "a", "hyp": "turn on the light", "wer": 0.0, "confidence": 0.8, "acoustic_confidence": 0.8},
            {"id": "b", "hyp": "the cat sat", "wer": 1.0, "confidence": 0.6, "acoustic_confidence": 0.6},
            {"id": "c", "hyp": "", "wer": 1.0, "confidence": None, "acoustic_confidence": None}]
    greedy = [{"id": "a", "hyp": "turn on the lite", "confidence": 0.7},
              {"id": "b", "hyp": "dhe kat zad on", "confidence": 0.5},
              {"id": "c", "hyp": "mm", "confidence": 0.2}]
    bench.add_greedy_signals(rows, greedy)
    assert rows[0]["agreement"] == pytest.approx(1 - 3 / 17, abs=1e-4)     # "light" -> "lite": three edits in 17
    assert rows[0]["confidence_x_agreement"] == pytest.approx(0.8 * rows[0]["agreement"], abs=1e-4)
    assert rows[1]["agreement"] < 0.7 and rows[1]["greedy_confidence"] == 0.5
    assert rows[2]["agreement"] == 0.0 and rows[2]["confidence_x_agreement"] is None
    with pytest.raises(RuntimeError, match="out of order"):
        bench.add_greedy_signals(rows[:2], greedy[1::-1])
    # each signal gets its own threshold, and the held-out shares are read at it
    lines = bench.signal_lines(rows, {"held": rows}, wer_bound=0.25, max_right_flagged=0.0)
    by_key = {line.split()[0]: line for line in lines}
    assert by_key["agreement"].startswith("agreement at 0.8:") and "tune 0.0 / 100.0 %" in by_key["agreement"]
    assert "held 0.0 / 100.0 %" in by_key["agreement"]
