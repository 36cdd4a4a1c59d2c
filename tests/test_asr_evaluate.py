"""Evaluation path (duet/asr/evaluate.py, nemo_recipes/evaluate_ctc.py): scoring, batching, CLI outputs."""

from __future__ import annotations

import json
import subprocess

import jiwer
import pytest

pytest.importorskip("nemo.collections.asr")

from duet.asr import evaluate  # noqa: E402
from tests.asr_helpers import REPO, SAMPLE_TRAIN, build_micro_model, sample_utterances, train_tokenizer, write_manifest  # noqa: E402

SCRIPT = REPO / "nemo_recipes" / "evaluate_ctc.py"


def test_score_normalises_both_sides_and_counts_like_jiwer():
    refs = ["Hello, World!", "the cat sat", "it's  FINE"]
    hyps = ["hello world", "the bat sat down", "its fine"]
    scored = evaluate.score(["a", "b", "c"], refs, hyps, [1.0, 1.0, 1.0])
    s = scored.summary
    # by hand: a) no error; b) cat->bat + inserted "down"; c) it's->its (apostrophe kept, so an error)
    assert (s["substitutions"], s["deletions"], s["insertions"], s["reference_words"]) == (2, 0, 1, 7)
    assert s["wer"] == pytest.approx(3 / 7)
    assert s["wer"] == pytest.approx(jiwer.wer(["hello world", "the cat sat", "it's fine"], hyps))
    assert [r["wer"] for r in scored.records] == pytest.approx([0.0, 2 / 3, 0.5])
    assert scored.records[0]["ref"] == "hello world"
    table = evaluate.format_examples(scored.records, n=1)
    assert table.index("the cat sat") < table.index("hello world")  # worst block comes first


def test_empty_reference_is_left_out_not_divided_by():
    scored = evaluate.score(["a", "b"], ["", "one two"], ["noise", "one two"], [1.0, 1.0])
    assert scored.records[0]["wer"] is None and scored.summary["scored_utterances"] == 1
    assert scored.summary["wer"] == 0.0


@pytest.fixture(scope="module")
def micro_model_and_manifest(tmp_path_factory):
    if not SAMPLE_TRAIN.is_dir():
        pytest.skip("bundled sample missing: run tools/make_sample_corpus.py")
    root = tmp_path_factory.mktemp("asr_eval")
    entries = sample_utterances(7)
    tok = train_tokenizer([e["text"] for e in entries], root / "tok", 40)
    model = build_micro_model(tok, seed=5)
    model.eval()
    path = root / "micro.nemo"
    model.save_to(str(path))
    return model, path, write_manifest(root / "test.json", entries), entries


def test_sorted_batches_give_the_same_transcripts_as_nemo_transcribe(micro_model_and_manifest):
    model, _, _, entries = micro_model_and_manifest
    paths = [e["audio_filepath"] for e in entries]
    ours = evaluate.transcribe_files(model, paths, batch_size=3)
    nemo = [h.text if hasattr(h, "text") else h for h in model.transcribe(paths, batch_size=1, verbose=False)]
    assert any(ours), "a random model should still emit some tokens"
    assert ours == nemo


def test_evaluate_cli_writes_per_utterance_and_summary(python, micro_model_and_manifest, tmp_path):
    _, model_path, manifest, entries = micro_model_and_manifest
    out = tmp_path / "out"
    proc = subprocess.run([python, str(SCRIPT), "--model", str(model_path), "--manifest", str(manifest),
                           "--out-dir", str(out), "--batch-size", "4", "--show", "2"],
                          capture_output=True, text=True, timeout=600, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [json.loads(line) for line in (out / "eval_utterances.jsonl").read_text().splitlines()]
    assert len(records) == len(entries) and {"id", "ref", "hyp", "wer"} <= records[0].keys()
    summary = json.loads((out / "eval_summary.json").read_text())
    assert summary["wer"] == pytest.approx(jiwer.wer([r["ref"] for r in records], [r["hyp"] for r in records]))
    assert summary["rtfx"] > 0 and summary["int8"] is False
    assert "--- worst 2 utterances ---" in proc.stdout and "evaluate_ctc: WER" in proc.stdout


def test_evaluate_cli_names_a_missing_manifest(python, micro_model_and_manifest, tmp_path):
    _, model_path, _, _ = micro_model_and_manifest
    missing = tmp_path / "missing.json"
    proc = subprocess.run([python, str(SCRIPT), "--model", str(model_path), "--manifest", str(missing)],
                          capture_output=True, text=True, timeout=600, cwd=REPO)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == f"evaluate_ctc: error: manifest not found: {missing}"


def test_int8_quantisation_replaces_linear_layers_and_still_transcribes(micro_model_and_manifest, tmp_path):
    import torch

    _, model_path, _, entries = micro_model_and_manifest
    model = evaluate.load_asr_model(model_path, device="cpu")
    evaluate.quantize_linear_int8(model)
    assert not any(type(m) is torch.nn.Linear for m in model.modules())
    texts = evaluate.transcribe_files(model, [e["audio_filepath"] for e in entries], batch_size=4)
    assert len(texts) == len(entries)
