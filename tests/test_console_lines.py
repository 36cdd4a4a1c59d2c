"""No library's log line on a tool's console without --verbose: every entry script's --help, and a real call of the
tools that load NeMo, Lightning or transformers for a user (the pipeline on a file, the server answering a request with
beam search, the tokenizer and token-LM trainers, fine-tuning a tiny GPT-2, pseudo-labelling with a .nemo teacher,
importing Whisper, plotting a .nemo's features, adapting a model to a folder of recordings, answering with a GPT-2
folder; nemo_recipes/finetune_ctc.py's console is checked in tests/test_asr_recipe.py), their standard output and error
read for NeMo's, Lightning's, OneLogger's and transformers' lines. Minutes, NeMo's import in most: the slow tier."""

from __future__ import annotations

import json
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
ENTRY_SCRIPTS = sorted(path.relative_to(REPO) for folder in ("tools", "nemo_recipes", "slm")
                       for path in (REPO / folder).glob("*.py") if 'if __name__ == "__main__"' in path.read_text())
# What NeMo, Lightning, OneLogger, transformers and Python's warnings print, at the start of a line
FOREIGN = re.compile(r"\s*(\[NeMo [IWE] |OneLogger:|No exporters were provided|(GPU|TPU|HPU) available:|LOCAL_RANK:|"
                     r"`Trainer\.fit` stopped|\[transformers\] |Loading weights:|Writing model shards:)|.*\b\w*Warning: ")
SAMPLE_FILE = REPO / "samples" / "LibriSpeech" / "test-clean" / "7001" / "700101" / "7001-700101-0000.flac"
BASE = REPO / "samples" / "checkpoints" / "whisper_tiny_ctc.nemo"


def foreign_lines(*outputs: str) -> list[str]:
    return [line for text in outputs for line in text.splitlines() if FOREIGN.match(line)]


def test_the_pattern_finds_what_the_libraries_print():
    """The pattern is no test that cannot fail: it catches the lines issue #56 saw on the console."""
    seen = ["[NeMo I 2026-12-01 10:00:00 ctc_decoding:455] Beam search requires that the vocabulary ...",
            "[NeMo W 2026-12-01 10:00:00 timestamp_utils:251] Specified segment seperators are not in ...",
            "OneLogger: Setting error_handling_strategy to DISABLE_QUIETLY_AND_REPORT_METRIC_ERROR ...",
            "GPU available: False, used: False", "/x/y.py:3: UserWarning: pin_memory is set ...",
            "[transformers] We strongly recommend passing in an `attention_mask` since your input_ids may be padded.",
            "Loading weights:   0%|          | 0/52 [00:00<?, ?it/s]",
            "Writing model shards:   0%|          | 0/1 [00:00<?, ?it/s]"]
    ours = ["finetune_ctc: epoch 1/4, step 40/204 (20 %), loss 0.911, about 3 min left",
            "  NeMo's, Lightning's and OneLogger's log lines go to experiments/logs/finetune_ctc_<name>.log"]
    assert foreign_lines("\n".join(seen + ours)) == seen


@pytest.mark.parametrize("script", ENTRY_SCRIPTS, ids=str)
def test_help_prints_no_library_log_line(script):
    proc = subprocess.run([sys.executable, str(script), "--help"], cwd=REPO, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert not foreign_lines(proc.stdout, proc.stderr)


def test_the_pipeline_on_a_file_prints_its_own_lines_only(tiny_slm_folder, tmp_path):
    log = tmp_path / "pipeline.log"
    proc = subprocess.run([sys.executable, "tools/pipeline.py", str(SAMPLE_FILE), "--asr-model", str(BASE),
                           "--slm-model", str(tiny_slm_folder), "--asr-decoding", "beam", "--beam-size", "4",
                           "--log", str(log)], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "transcript:" in proc.stdout and not foreign_lines(proc.stdout, proc.stderr)
    assert foreign_lines(log.read_text())  # they went to the log


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_server_answering_a_request_prints_its_own_and_uvicorns_lines_only(tiny_slm_folder, tmp_path):
    """With beam search NeMo notes the vocabulary at the first request, long after the models loaded."""
    import httpx

    port, log = free_port(), tmp_path / "serve.log"
    server = subprocess.Popen([sys.executable, "tools/serve.py", "--port", str(port), "--asr-model", str(BASE),
                               "--slm-model", str(tiny_slm_folder), "--asr-decoding", "beam", "--beam-size", "4",
                               "--log", str(log)], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    try:
        deadline, answer = time.monotonic() + 600, None
        while answer is None and time.monotonic() < deadline and server.poll() is None:
            try:
                with open(SAMPLE_FILE, "rb") as audio:
                    answer = httpx.post(f"http://127.0.0.1:{port}/v1/audio/transcriptions", timeout=120,
                                        files={"file": (SAMPLE_FILE.name, audio, "audio/flac")})
            except httpx.TransportError:  # not listening yet
                time.sleep(1)
        server.send_signal(signal.SIGINT)  # uvicorn's graceful shutdown
        out, err = server.communicate(timeout=120)
    finally:
        server.kill()
    assert answer is not None and answer.status_code == 200, err[-3000:]
    assert json.loads(answer.text)["text"]
    assert "serving on http://127.0.0.1" in out and "POST /v1/audio/transcriptions" in out + err
    assert not foreign_lines(out, err), out + err
    assert foreign_lines(log.read_text())  # they went to the log


def test_training_a_tokenizer_prints_its_own_line_only(tmp_path):
    from tests.asr_helpers import sample_utterances, write_manifest

    manifest = write_manifest(tmp_path / "train.json", sample_utterances(8))
    proc = subprocess.run([sys.executable, "tools/train_tokenizer.py", "--manifests", str(manifest), "--vocab-size",
                           "30", "--out-root", str(tmp_path / "tokenizers")], cwd=REPO, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("tokenizer: bpe, 30 tokens") and proc.stderr == ""
    assert foreign_lines((tmp_path / "tokenizers" / "spe_bpe_v30" / "train.log").read_text())


def test_training_a_token_lm_prints_its_own_lines_only(tmp_path):
    from duet.asr.ngram import find_kenlm_tool

    if find_kenlm_tool("lmplz") is None:
        pytest.skip("KenLM lmplz not built: run bash tools/setup.sh")
    text = tmp_path / "text.txt"
    text.write_text("set a timer for five minutes\nplay some jazz\nwhat is the weather like today\n")
    log = tmp_path / "train_ngram_lm.log"
    proc = subprocess.run([sys.executable, "tools/train_ngram_lm.py", "--unit", "token", "--tokenizer", str(BASE),
                           "--order", "3", "--text", str(text), "--out", str(tmp_path / "lm.arpa"), "--no-binary",
                           "--log", str(log)], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith(f"wrote {tmp_path / 'lm.arpa'} (token 3-gram")
    assert proc.stderr.startswith("lmplz: 3-gram token LM from 3 sentences") and not foreign_lines(proc.stdout,
                                                                                                  proc.stderr)
    assert foreign_lines(log.read_text())  # NeMo's, loading the .nemo's tokenizer


def test_pseudo_labelling_with_a_nemo_teacher_prints_its_count_and_result_only(tmp_path):
    audio = tmp_path / "audio"
    audio.mkdir()
    (audio / SAMPLE_FILE.name).symlink_to(SAMPLE_FILE)
    log = tmp_path / "pseudo_label.log"
    proc = subprocess.run([sys.executable, "tools/pseudo_label.py", str(audio), "--out", str(tmp_path / "p.json"),
                           "--teacher", str(BASE), "--threads", "1", "--log", str(log)], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("pseudo_label: kept ") and proc.stderr == "  1/1 files\n"
    assert foreign_lines(log.read_text())  # NeMo's, restoring the teacher


def test_importing_whisper_prints_its_result_line_only(tmp_path):
    from tests.asr_helpers import train_tokenizer

    tokenizer = train_tokenizer(["set a timer for five minutes", "play some jazz", "what is the weather"] * 4,
                                tmp_path / "tokenizer", 30)
    log = tmp_path / "import_whisper.log"
    proc = subprocess.run([sys.executable, "tools/import_whisper.py", "--tokenizer", str(tokenizer), "--out",
                           str(tmp_path / "w.nemo"), "--log", str(log)], cwd=REPO, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("import_whisper: Whisper tiny.en encoder + CTC head") and proc.stderr == ""
    assert foreign_lines(log.read_text())  # NeMo's, building and saving the model


def test_plotting_a_nemo_models_features_prints_its_result_line_only(tmp_path):
    log = tmp_path / "plot_features.log"
    proc = subprocess.run([sys.executable, "tools/plot_features.py", "--model", str(BASE), "--audio", str(SAMPLE_FILE),
                           "--out", str(tmp_path / "features.png"), "--log", str(log)], cwd=REPO, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith(f"plot_features: {SAMPLE_FILE.name}") and proc.stderr == ""
    assert foreign_lines(log.read_text())  # NeMo's, restoring the model


def test_adapting_to_a_folder_prints_its_own_lines_only(micro_model_and_manifest, tmp_path):
    """The micro .nemo as pseudo-labeller and base (as in tests/test_adaptation.py), a few steps."""
    from tests.asr_helpers import sample_utterances

    _, micro_path, _, _ = micro_model_and_manifest
    recordings = tmp_path / "my_recordings"
    recordings.mkdir()
    for entry in sample_utterances(12):
        shutil.copy(entry["audio_filepath"], recordings)
    log, out = tmp_path / "adapt_libraries.log", tmp_path / "mine"
    proc = subprocess.run([sys.executable, "tools/adapt.py", str(recordings), "--out", str(out), "--base",
                           str(micro_path), "--teacher", str(micro_path), "--min-confidence", "0", "--max-steps", "2",
                           "--validate-every", "2", "--batch-size", "4", "--log", str(log)], cwd=REPO,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines()[-1].startswith("adapt: held-out WER ") and proc.stderr == ""
    assert proc.stdout == (out / "adapt.log").read_text()  # the run's own lines, kept in the run folder too
    assert foreign_lines(log.read_text())  # NeMo's and Lightning's


def test_answering_with_a_gpt2_folder_prints_the_answer_only(tiny_slm_folder, tmp_path):
    log = tmp_path / "generate.log"
    proc = subprocess.run([sys.executable, "slm/generate.py", str(tiny_slm_folder), "set a timer", "--max-new-tokens",
                           "4", "--log", str(log)], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.endswith("\n") and proc.stderr == "" and not foreign_lines(proc.stdout)
    assert foreign_lines(log.read_text())  # transformers' (loading the weights)


def test_fine_tuning_a_gpt2_prints_its_own_lines_only(tmp_path):
    """A tiny scratch GPT-2, a few steps: transformers' lines and progress bars go to --log."""
    from tests.test_slm_finetune import TINY_RUN

    log = tmp_path / "finetune_libraries.log"
    proc = subprocess.run([sys.executable, "slm/finetune.py", "--config-name", "slm_tiny_offline",
                           f"output_dir={tmp_path / 'run'}", *TINY_RUN, "train.threads=1", "--log", str(log)],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert " done in " in proc.stdout and proc.stderr == "", proc.stderr[-3000:]
    assert proc.stdout == (tmp_path / "run" / "finetune.log").read_text()  # the run's own lines, kept with it
    assert foreign_lines(log.read_text())  # transformers' (a config note, the shard-writing bar)
