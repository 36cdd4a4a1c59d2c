"""Evaluation path (duet/asr/inference.py, scoring.py, evaluation.py, nemo_recipes/evaluate_ctc.py): scoring, batching, CLI outputs."""

from __future__ import annotations

import json
import shutil
import subprocess

import jiwer
import pytest

pytest.importorskip("nemo.collections.asr")

from duet.asr import inference, scoring  # noqa: E402
from duet.asr.decoding import decoding_settings  # noqa: E402
from duet.text import normalize_text  # noqa: E402
from duet.asr.decoding.nemo_decoding import hypothesis_text  # noqa: E402
from tests.asr_helpers import REPO, transcripts_with  # noqa: E402

SCRIPT = REPO / "nemo_recipes" / "evaluate_ctc.py"


def test_score_normalises_both_sides_and_counts_like_jiwer():
    refs = ["Hello, World!", "the cat sat", "it's  FINE"]
    hyps = ["hello world", "the bat sat down", "its fine"]
    scored = scoring.score(["a", "b", "c"], refs, hyps, [1.0, 1.0, 1.0])
    s = scored.summary
    # by hand: a) no error; b) cat->bat + inserted "down"; c) it's->its (apostrophe kept, so an error)
    assert (s["substitutions"], s["deletions"], s["insertions"], s["reference_words"]) == (2, 0, 1, 7)
    assert s["wer"] == pytest.approx(3 / 7)
    assert s["wer"] == pytest.approx(jiwer.wer(["hello world", "the cat sat", "it's fine"], hyps))
    assert [r["wer"] for r in scored.records] == pytest.approx([0.0, 2 / 3, 0.5])
    assert scored.records[0]["ref"] == "hello world"
    table = scoring.format_examples(scored.records, n=1)
    assert table.index("the cat sat") < table.index("hello world")  # worst block comes first


def test_empty_reference_is_left_out_not_divided_by():
    scored = scoring.score(["a", "b"], ["", "one two"], ["noise", "one two"], [1.0, 1.0])
    assert scored.records[0]["wer"] is None and scored.summary["scored_utterances"] == 1
    assert scored.summary["wer"] == 0.0


def test_sorted_batches_give_the_same_transcripts_as_nemo_transcribe(micro_model_and_manifest):
    model, _, _, entries = micro_model_and_manifest
    paths = [e["audio_filepath"] for e in entries]
    ours = inference.transcribe_files(model, paths, batch_size=3)
    nemo = [hypothesis_text(h) for h in model.transcribe(paths, batch_size=1, verbose=False)]
    assert any(ours), "a random model should still emit some tokens"
    assert ours == nemo


def test_front_end_chunk_factor_leaves_chunks_of_two_and_is_even():
    from types import SimpleNamespace

    factors = []
    model = SimpleNamespace(encoder=SimpleNamespace(change_subsampling_conv_chunking_factor=factors.append),
                            cfg=SimpleNamespace(encoder={}))
    for batch_size in (1, 2, 3, 4, 6, 7, 32, None):
        inference.set_front_end_chunking(model, batch_size)
    # NeMo cuts a batch of b into chunks of b // factor and accepts only 1 or an even factor
    assert factors == [1, 1, 1, 2, 2, 2, 16, 1]


def default_strides(tensor) -> bool:
    """True if ``tensor`` is laid out as a new tensor of its shape would be. (``is_contiguous`` cannot tell:
    the front end's weights have a 1-sized dimension, so both layouts count as contiguous.)"""
    import torch

    return tensor.stride() == torch.empty(tensor.shape).stride()


def test_cpu_front_end_chunks_keep_the_transcripts_and_are_undone(micro_model_and_manifest):
    model, _, _, entries = micro_model_and_manifest
    paths = [e["audio_filepath"] for e in entries]
    pre_encode = model.encoder.pre_encode
    seen = []
    hook = pre_encode.register_forward_pre_hook(
        lambda module, args: seen.append((module.subsampling_conv_chunking_factor,
                                          default_strides(module.conv[0].weight))))
    try:
        ours = inference.transcribe_files(model, paths, batch_size=len(paths))  # 7 files: chunks of 3, 3 and 1
    finally:
        hook.remove()
    assert seen == [(2, False)] and pre_encode.subsampling_conv_chunking_factor == 1  # chunked and channels-last ...
    assert default_strides(pre_encode.conv[0].weight)  # ... while transcribing only: training gets the model back
    assert ours == [hypothesis_text(h) for h in model.transcribe(paths, batch_size=1, verbose=False)]


def test_evaluate_cli_writes_per_utterance_and_summary(python, micro_model_and_manifest, tmp_path):
    _, model_path, manifest, entries = micro_model_and_manifest
    out = tmp_path / "out"
    log = tmp_path / "logs" / "evaluate.log"
    proc = subprocess.run([python, str(SCRIPT), "--model", str(model_path), "--manifest", str(manifest),
                           "--out-dir", str(out), "--batch-size", "4", "--show", "2", "--log", str(log)],
                          capture_output=True, text=True, timeout=600, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # NeMo's lines go to the log; the console has the decoding, where the log is, and the results
    assert "successfully restored" in log.read_text() and "NeMo" not in proc.stdout
    assert proc.stderr.splitlines() == [f"evaluate_ctc: decoding: greedy (default: no {model_path.parent / 'decoding.json'})",
                                        f"evaluate_ctc: NeMo's log lines: {log} (--verbose shows them, and a "
                                        "progress bar)"]
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


def test_evaluate_cli_skips_unreadable_audio_naming_each_before_the_model_loads(micro_model_and_manifest, tmp_path,
                                                                                monkeypatch, capsys):
    _, model_path, manifest, entries = micro_model_and_manifest
    missing, empty = tmp_path / "missing.flac", tmp_path / "empty.flac"
    empty.write_bytes(b"")
    with_bad = tmp_path / "with_bad.json"
    with_bad.write_text(manifest.read_text() + "".join(
        json.dumps({"audio_filepath": str(path), "duration": 1.0, "text": "hello"}) + "\n"
        for path in (missing, empty)))
    said_before_loading, load = [], inference.load_asr_model

    def load_and_look(*args, **kwargs):
        said_before_loading.append(capsys.readouterr().err)
        return load(*args, **kwargs)
    monkeypatch.setattr(inference, "load_asr_model", load_and_look)
    out = tmp_path / "out"
    code, stdout, _ = run_evaluate(["--model", model_path, "--manifest", with_bad, "--out-dir", out,
                                    "--log", tmp_path / "log.txt"], capsys)
    assert code == 1  # the run went on, and says that not everything was scored
    assert said_before_loading[0].splitlines()[:2] == [f"evaluate_ctc: skipped no such file: {missing}",
                                                       f"evaluate_ctc: skipped empty file: {empty}"]
    summary = json.loads((out / "eval_summary.json").read_text())
    assert summary["utterances"] == len(entries) and summary["skipped"] == 2
    assert "2 skipped (unreadable audio)" in stdout

    missing_only = tmp_path / "missing_only.json"
    missing_only.write_text(json.dumps({"audio_filepath": str(missing), "duration": 1.0, "text": "hello"}) + "\n")
    code, _, err = run_evaluate(["--model", model_path, "--manifest", missing_only], capsys)
    assert code == 2 and err.splitlines() == [f"evaluate_ctc: error: no readable audio: no such file: {missing}"]


def test_worker_processes_give_the_same_transcripts_in_input_order(micro_model_and_manifest):
    model, _, _, entries = micro_model_and_manifest
    paths = [e["audio_filepath"] for e in entries]
    one = inference.transcribe_files(model, paths, batch_size=2, workers=1)
    two = inference.transcribe_files(model, paths, batch_size=2, workers=2)  # 4 batches over 2 processes
    assert any(one) and two == one


def test_batches_run_in_forked_workers_and_the_model_comes_back_as_it_was(micro_model_and_manifest, monkeypatch):
    import os

    import numpy as np

    model, _, _, _ = micro_model_and_manifest
    # the fake decoder runs wherever the batch is decoded and reports that process, the batch's lengths and
    # whether the model it got was in eval mode and channels-last
    monkeypatch.setattr(inference, "_decode_batch", lambda m, audios, decode: [
        f"{os.getpid()} {len(a)} {m.training} {default_strides(m.encoder.pre_encode.conv[0].weight)}" for a in audios])
    audios = [np.zeros(n, dtype=np.float32) for n in (1600, 4800, 3200, 8000, 6400)]
    model.train()
    try:
        texts = inference.transcribe_audio(model, audios, batch_size=2, workers=2)
        assert model.training  # back as it was ...
    finally:
        model.eval()
    assert default_strides(model.encoder.pre_encode.conv[0].weight)  # ... in the default layout
    pids = {t.split()[0] for t in texts}
    assert [int(t.split()[1]) for t in texts] == [len(a) for a in audios]  # input order
    assert {tuple(t.split()[2:]) for t in texts} == {("False", "False")}  # eval mode, channels-last in the workers
    assert str(os.getpid()) not in pids
    single = inference.transcribe_audio(model, audios[:1], workers=2)
    assert single[0].split()[0] == str(os.getpid())  # a single batch is not worth a process


def test_a_failing_worker_batch_raises_in_the_caller(micro_model_and_manifest, monkeypatch):
    import numpy as np

    model, _, _, _ = micro_model_and_manifest

    def broken(m, audios, decode):
        raise RuntimeError(f"batch of {len(audios)} failed")

    monkeypatch.setattr(inference, "_decode_batch", broken)
    with pytest.raises(RuntimeError, match="batch of 2 failed"):
        inference.transcribe_audio(model, [np.zeros(1600, dtype=np.float32)] * 4, batch_size=2, workers=2)
    assert default_strides(model.encoder.pre_encode.conv[0].weight)


def test_a_worker_that_dies_is_an_error_not_a_hang(micro_model_and_manifest, monkeypatch):
    import os
    from concurrent.futures.process import BrokenProcessPool

    import numpy as np

    model, _, _, _ = micro_model_and_manifest
    monkeypatch.setattr(inference, "_decode_batch", lambda m, audios, decode: os._exit(9))  # as if killed for memory
    with pytest.raises(BrokenProcessPool):
        inference.transcribe_audio(model, [np.zeros(1600, dtype=np.float32)] * 4, batch_size=2, workers=2)


def test_workers_below_one_are_refused(micro_model_and_manifest, capsys):
    model, model_path, manifest, _ = micro_model_and_manifest
    with pytest.raises(inference.AsrInputError, match="workers must be 1 or more, got 0"):
        inference.transcribe_audio(model, [], workers=0)
    code, _, err = run_evaluate(["--model", str(model_path), "--manifest", str(manifest), "--workers", "0"], capsys)
    assert code == 2 and err.strip().splitlines()[-1] == "evaluate_ctc: error: --workers must be 1 or more, got 0"
    code, _, err = run_evaluate(["--model", str(model_path), "--manifest", str(manifest), "--stream",
                                 "--workers", "2"], capsys)
    assert code == 2 and "--workers not used with --stream" in err


def test_cpu_workers_follow_the_torch_thread_budget(monkeypatch):
    import torch

    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert inference.cpu_workers() == 1
        torch.set_num_threads(3)
        assert inference.cpu_workers() == 3
        monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
        assert inference.cpu_workers() == 1  # other ranks already use the cores
    finally:
        torch.set_num_threads(threads)


def test_int8_quantisation_replaces_linear_layers_and_still_transcribes(micro_model_and_manifest, tmp_path):
    import torch

    _, model_path, _, entries = micro_model_and_manifest
    model = inference.load_asr_model(model_path, device="cpu")
    inference.quantize_linear_int8(model)
    assert not any(type(m) is torch.nn.Linear for m in model.modules())
    texts = inference.transcribe_files(model, [e["audio_filepath"] for e in entries], batch_size=4)
    assert len(texts) == len(entries)


# ---------------------------------------------------------------- decoding and streaming options (in-process)


def run_evaluate(argv, capsys) -> tuple[int, str, str]:
    from nemo_recipes.evaluate_ctc import main

    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_evaluate_cli_beam_lm_decodes_with_the_lm_and_records_it(micro_model_and_manifest, micro_token_lm, tmp_path,
                                                                 capsys):
    model, model_path, manifest, entries = micro_model_and_manifest
    out = tmp_path / "out"
    code, stdout, err = run_evaluate(["--model", model_path, "--manifest", manifest, "--out-dir", out, "--decoding",
                                      "beam_lm", "--lm", micro_token_lm, "--alpha", "0.8", "--beta", "1.5"], capsys)
    assert code == 0, err[-3000:]
    summary = json.loads((out / "eval_summary.json").read_text())
    assert summary["decoding"] == "beam4+LM(a=0.8,b=1.5)" and "beam4+LM(a=0.8,b=1.5)" in stdout
    hyps = [json.loads(line)["hyp"] for line in (out / "eval_utterances.jsonl").read_text().splitlines()]
    paths = [e["audio_filepath"] for e in entries]
    fused = transcripts_with(model, decoding_settings("beam_lm", ngram_lm=str(micro_token_lm), alpha=0.8, beta=1.5),
                             paths)
    assert hyps == [normalize_text(t) for t in fused]
    assert fused != transcripts_with(model, decoding_settings("beam", beta=1.5), paths), "the LM was not used"


def test_evaluate_cli_decodes_as_the_models_decoding_json_says_as_the_pipeline_does(micro_model_and_manifest,
                                                                                     micro_token_lm, tmp_path, capsys):
    from duet.asr.decoding.file import write_decoding_file

    model, model_path, manifest, entries = micro_model_and_manifest
    folder = tmp_path / "model"
    folder.mkdir()
    shutil.copy(model_path, folder / "m.nemo")
    saved = decoding_settings("beam_lm", ngram_lm=str(micro_token_lm), alpha=0.8, beta=1.5)
    write_decoding_file(folder / "decoding.json", saved)
    code, stdout, err = run_evaluate(["--model", folder / "m.nemo", "--manifest", manifest, "--out-dir",
                                      tmp_path / "out"], capsys)
    assert code == 0, err[-3000:]
    assert f"evaluate_ctc: decoding: beam4+LM(a=0.8,b=1.5) from {folder / 'decoding.json'}" in err
    summary = json.loads((tmp_path / "out" / "eval_summary.json").read_text())
    assert summary["decoding_source"] == f"from {folder / 'decoding.json'}"
    hyps = [json.loads(line)["hyp"] for line in (tmp_path / "out" / "eval_utterances.jsonl").read_text().splitlines()]
    assert hyps == [normalize_text(t) for t in transcripts_with(model, saved, [e["audio_filepath"] for e in entries])]
    # an option given replaces the file's own value; another strategy leaves the file out
    code, _, err = run_evaluate(["--model", folder / "m.nemo", "--manifest", manifest, "--out-dir", tmp_path / "o2",
                                 "--alpha", "0.3"], capsys)
    assert code == 0 and "beam4+LM(a=0.3,b=1.5) from" in err and "--alpha given" in err
    code, _, err = run_evaluate(["--model", folder / "m.nemo", "--manifest", manifest, "--out-dir", tmp_path / "o3",
                                 "--decoding", "greedy"], capsys)
    assert code == 0 and "evaluate_ctc: decoding: greedy (given: --decoding greedy)" in err


@pytest.mark.parametrize("options, message", [
    (["--decoding", "beam_lm"], "--decoding beam_lm needs --lm <token ARPA>"),
    (["--decoding", "greedy", "--lm", "x.arpa"], "--lm not used by --decoding greedy"),
    (["--alpha", "0.5"], "--alpha needs --decoding beam or beam_lm or joint: this model decodes greedily by default"),
    (["--decoding", "beam", "--alpha", "0.5"], "--alpha not used by --decoding beam"),
    (["--stream", "--decoding", "beam"], "--stream decodes greedily"),
])
def test_evaluate_cli_inconsistent_decoding_options_are_one_line_errors(options, message, tmp_path, capsys):
    code, _, err = run_evaluate(["--model", tmp_path / "m.nemo", "--manifest", tmp_path / "m.json", *options], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert err.startswith("evaluate_ctc: error: ") and message in err


def test_evaluate_cli_lm_for_another_tokenizer_is_a_one_line_error(micro_model_and_manifest, tmp_path, capsys):
    from duet.asr.ngram import find_kenlm_tool, train_ngram_lm
    from duet.data.tokenizer import train_tokenizer

    if find_kenlm_tool("lmplz") is None:
        pytest.skip("KenLM lmplz not built: run bash tools/setup.sh")
    _, model_path, manifest, entries = micro_model_and_manifest
    texts = [e["text"] for e in entries]
    other = tmp_path / "other.arpa"
    train_ngram_lm(texts, other, order=3, unit="token", tokenizer_dir=train_tokenizer(texts, tmp_path / "tok", 30),
                   binary=False)
    code, _, err = run_evaluate(["--model", model_path, "--manifest", manifest, "--decoding", "beam_lm",
                                 "--lm", other], capsys)
    assert code == 2 and "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("evaluate_ctc: error: ")
    assert "30-token tokenizer, the model has 40" in err


def test_evaluate_cli_stream_reports_lookahead_and_chunk_compute(tiny_streaming_model, tiny_streaming_nemo,
                                                                micro_model_and_manifest, tmp_path, capsys):
    _, _, manifest, entries = micro_model_and_manifest
    out = tmp_path / "out"
    code, stdout, err = run_evaluate(["--model", tiny_streaming_nemo, "--manifest", manifest, "--out-dir", out,
                                      "--stream"], capsys)
    assert code == 0, err[-3000:]
    summary = json.loads((out / "eval_summary.json").read_text())
    st = summary["streaming"]
    assert (st["lookahead_ms"], st["chunk_ms"]) == (480.0, 560.0) and summary["decoding"] == "greedy"
    # one chunk per 560 ms of audio, give or take the first and last chunk of each file
    assert abs(st["chunks"] - sum(e["duration"] for e in entries) / 0.56) <= 2 * len(entries)
    assert 0 < st["chunk_compute_ms_median"] <= st["chunk_compute_ms_max"]
    assert "look-ahead 480 ms, chunk 560 ms" in stdout
    hyps = [json.loads(line)["hyp"] for line in (out / "eval_utterances.jsonl").read_text().splitlines()]
    offline = inference.transcribe_files(tiny_streaming_model, [e["audio_filepath"] for e in entries])
    assert hyps == [normalize_text(t) for t in offline] and any(hyps)


def test_evaluate_cli_stream_refuses_an_offline_model(micro_model_and_manifest, capsys):
    _, model_path, manifest, _ = micro_model_and_manifest
    code, _, err = run_evaluate(["--model", model_path, "--manifest", manifest, "--stream"], capsys)
    assert code == 2 and "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert last.startswith("evaluate_ctc: error: model was not trained for streaming")
    assert "configs/fastconformer_small_streaming.yaml" in last
