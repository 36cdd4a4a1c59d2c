"""Slow tier: the README's demo end to end on the bundled sample, and what it must show.

Runs ``tools/demo.py`` once, the README's own command with two passes of the ASR fine-tune and fewer SLM steps
(stages already up to date are skipped, so a second run is quick), then checks that both models learned and that the
pipeline answers held-out spoken requests.
"""

from __future__ import annotations

import json
import subprocess

import jiwer
import pytest

from duet.data.real_speech import DEFAULT_ROOT as REAL_SPEECH
from duet.foundation.files import read_jsonl
from duet.text import normalize_spoken

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def demo(repo_root, python):
    if not (repo_root / "samples" / "checkpoints" / "whisper_tiny_ctc.nemo").exists():
        pytest.fail("the bundled base checkpoint samples/checkpoints/whisper_tiny_ctc.nemo is missing")
    # Two passes of the ASR fine-tune: the demo's own where ../shared's real mix exists, half of them without it (a
    # clean clone, CI), which keeps the slow tier minutes shorter. Without the mix, from base v6: test-clean 37.07 ->
    # 31.66 % and unseen voices 60.29 -> 60.05 % in two passes (four: 29.92 %, 62.25 %; 2026-12-06)
    # And 320 steps of the SLM, not the demo's 480: the demo's longest stage on one thread, whose thresholds below
    # were measured at 320; the extra steps make the answers copy the request more often (RESULTS.md "Demo answers")
    result = subprocess.run([python, "tools/demo.py", "--asr-epochs", "2", "--slm-steps", "320"], cwd=repo_root,
                            capture_output=True, text=True, timeout=2400)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    stages = 14 if REAL_SPEECH.is_dir() else 12  # realmix and realtext run only where ../shared/real_speech exists
    assert f"demo: {stages} stage(s) done" in result.stdout
    return repo_root / "experiments"


def test_asr_finetune_from_the_whisper_base_learns_the_sample(demo):
    summary = json.loads((demo / "demo_asr" / "finetune_summary.json").read_text())
    assert summary["from_checkpoint"] and not summary["vocabulary_changed"]  # the base's tokenizer and CTC head kept
    assert summary["encoder_finetune"]["pretrained_parameters"] > 7_000_000  # Whisper's encoder, at its own lr
    assert summary["test_before"]["utterances"] == summary["test_after"]["utterances"] == 80
    # The ASR acceptance: WER on the held-out voices drops. The sample is telephone speech and the base learnt
    # from wideband speech (band-limited at times by augmentation), so there is something to learn (RESULTS.md,
    # "Demo fine-tune from the Whisper base": base v6 37.1 % -> 29.5 % in two epochs; v5 34.0 -> 28.2 %). Two
    # points on 80 utterances are ~10 words. The training loss itself is no measure here: the batches mix the sample
    # with real speech the base hears at ~50 % WER, and the head starts low.
    assert summary["test_after"]["wer"] < summary["test_before"]["wer"] - 0.02
    assert summary["test_after"]["wer"] < 0.45  # a regression guard


def test_demo_fine_tune_keeps_what_the_base_hears(demo):
    """The demo scores the base and its fine-tune on every generalisation set: the fine-tune must win its own domain
    and not lose the voices outside every pool nor, where the real recordings exist, the real speech the base hears
    (the demo flags a real set more than REAL_SET_TOLERANCE points worse)."""
    from duet.demo.stages import REAL_SET_TOLERANCE

    before, after = ({r["set"]: r for r in json.loads((demo / "demo_generalisation" / name / "generalisation.json")
                                                       .read_text())["rows"]} for name in ("base", "demo_asr"))
    assert before.keys() == after.keys() and {"sample test-clean", "unseen voices"} <= before.keys()
    assert after["sample test-clean"]["wer"] < before["sample test-clean"]["wer"] - 0.02
    # unseen voices +1.9 points from base v6 and v5, +1.2 from v4 (RESULTS.md, "Demo fine-tune from the Whisper base":
    # from v4, +2.6 at twice the encoder's learning rate, +4.3 at five times)
    assert after["unseen voices"]["wer"] < before["unseen voices"]["wer"] + 0.03
    real = [name for name, row in after.items() if row["distance"].startswith("real")]
    assert bool(real) == REAL_SPEECH.is_dir()
    worse = {name: round(100 * (after[name]["wer"] - before[name]["wer"]), 2) for name in real}
    assert all(points <= REAL_SET_TOLERANCE for points in worse.values()), worse


def test_the_joint_transcripts_of_the_sample_do_not_get_worse_with_the_fine_tune(demo):
    """The pipeline's joint decoding on the sample's held-out voices, the base and then the fine-tune judging Whisper's
    proposals: far below the greedy figures, and the fine-tune not worse (the demo's run: 4.83 -> 4.05 %, RESULTS.md
    "Joint decoding"; two points on 80 utterances are ~10 words)."""
    before, after = (json.loads((demo / "demo_generalisation" / name / "generalisation.json").read_text())["rows"]
                     for name in ("joint_base", "joint_demo_asr"))
    assert [r["set"] for r in before] == [r["set"] for r in after] == ["sample test-clean"]
    assert after[0]["wer"] < 0.15 and after[0]["wer"] <= before[0]["wer"] + 0.02


def test_slm_offline_preset_learns(demo):
    """The demo's preset (configs/slm_whisper_demo.yaml) scores only the fine-tuned model: its starting point, the
    converted Whisper decoder, answers no instruction (RESULTS.md "slm-whisper")."""
    after = json.loads((demo / "demo_slm" / "metrics.json").read_text())["after"]
    assert after["masked_loss"] < 0.5  # measured 0.26 (RESULTS.md "Demo answers"; 0.46 at 250 steps and twice the rate)
    # greedy answers to held-out spoken assistant requests: the right kind and on topic (right kind and every slot
    # word of the request), made of English words without a loop; measured 92.0 / 76.8 % and 91 % (one run)
    assert after["assistant_rows"] >= 100
    assert after["assistant_kind"] >= 80 and after["assistant_on_topic"] >= 60
    # well-formed: 91 % of the answers (duet.demo.stages.slm_summary reports it from generations_after.jsonl)


def test_pipeline_transcribes_and_answers_held_out_requests(demo):
    requests = {e["audio_filepath"]: e["text"] for e in read_jsonl(demo / "demo_pipeline" / "requests.json")}
    answers = read_jsonl(demo / "demo_pipeline" / "answers.jsonl")
    assert len(answers) == len(requests) > 20 and all(a["error"] is None for a in answers)
    refs = [requests[a["file"]] for a in answers]
    hyps = [a["transcript"] for a in answers]
    # measured 9.3 % with beam 8 + the corpus and WordNet LM from base v6 (8.7 % from v5, 10.3 % from v3, 23.7 % from
    # the FastConformer base v9; RESULTS.md); a regression guard, not the goal
    assert jiwer.wer([normalize_spoken(r) for r in refs], [normalize_spoken(h) for h in hyps]) < 0.25
    answered = [a for a in answers if a["transcript"]]
    assert all(a["response"] for a in answered)
    # each transcript is judged by its confidence against the threshold the demo chose for its model: some of its
    # own held-out requests are not understood (5 of 52 from base v6, heard at 42 % WER against the answered ones'
    # 6.3 %) and get the apology instead of the language model's answer
    from duet.asr.confidence import NOT_UNDERSTOOD_REPLY

    unsure = [a for a in answered if not a["understood"]]
    sure = [a for a in answered if a["understood"]]
    assert all(a["confidence"] is not None for a in answered) and len(unsure) <= len(answered) // 3
    assert all(a["response"] == NOT_UNDERSTOOD_REPLY and "slm" not in a["latency_s"] for a in unsure)
    if unsure:  # what it flags, it heard worse than what it answers
        def heard(turns):
            return jiwer.wer([normalize_spoken(requests[a["file"]]) for a in turns],
                             [normalize_spoken(a["transcript"]) for a in turns])
        assert heard(unsure) > heard(sure)
    # related: the right kind of answer to what was said, for requests with a reference answer (measured 46-71 %)
    from duet.demo.stages import answer_scores

    scores = answer_scores(answered, requests)
    assert scores["assistant_rows"] >= 20 and scores["assistant_kind"] >= 30
    assert all({"audio_load", "asr", "slm", "total", "model_load"} <= a["latency_s"].keys()
               for a in answered if a["understood"])


def test_pipeline_with_no_options_uses_the_demos_models_and_decoding(demo, repo_root, python):
    """After the demo, ``python tools/pipeline.py some.flac`` just works, decoding as the demo's stage did."""
    answers = read_jsonl(demo / "demo_pipeline" / "answers.jsonl")[:2]
    result = subprocess.run([python, "tools/pipeline.py", *(a["file"] for a in answers), "--json"], cwd=repo_root,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [json.loads(line) for line in result.stdout.strip().splitlines()]
    assert [line["transcript"] for line in lines] == [a["transcript"] for a in answers]
    assert [line["asr_decoding"] for line in lines] == [a["asr_decoding"] for a in answers]
    # the threshold travels in the same decoding.json: the same transcripts are understood, or not
    assert [line["understood"] for line in lines] == [a["understood"] for a in answers]
    assert all(line["response"] for line in lines)
