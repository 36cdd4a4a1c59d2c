"""bench/pipeline_latency.py: its option checks and the helpers behind the table (timings are never asserted)."""

import importlib.util
import subprocess
import sys
from types import SimpleNamespace

import pytest
import soundfile


@pytest.fixture(scope="module")
def bench(repo_root):
    spec = importlib.util.spec_from_file_location("pipeline_latency", repo_root / "bench" / "pipeline_latency.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("option", [["--repeats", "0"], ["--seconds", "0"], ["--threads", "0"],
                                    ["--asr-model", "no/such/model.nemo"], ["--asr-decoding", "beam_lm"]])
def test_bad_options_are_one_line_errors(option, python, repo_root, tmp_path):
    models = [] if option[0] == "--asr-model" else ["--asr-model", str(tmp_path), "--slm-model", str(tmp_path)]
    result = subprocess.run([python, "bench/pipeline_latency.py", *models, *option], cwd=repo_root,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert option[0] in result.stderr or option[1] in result.stderr


def test_the_clip_is_held_out_speech_of_the_asked_length(bench, sample_manifests, tmp_path):
    clip = bench.make_clip(5.0, tmp_path / "clip.flac", sample_manifests["test-clean"])
    info = soundfile.info(clip)
    assert info.samplerate == 16000 and info.channels == 1 and info.duration == pytest.approx(5.0, abs=0.01)


def test_measure_takes_medians_after_a_warm_up(bench):
    runs = iter([5.0, 1.0, 3.0, 2.0])  # the first (warm-up) run is slow and left out

    class Timed:
        def run(self, clip):
            asr = next(runs)
            return SimpleNamespace(latency_s={"audio_load": 0.5, "asr": asr, "slm": 1.0, "total": asr + 1.5},
                                   response="ok", transcript="hi")

    medians = bench.measure(Timed(), "clip.flac", repeats=3)
    assert medians["asr"] == 2.0 and medians["total"] == 3.5 and medians["to_transcript"] == 2.5
    assert (medians["answer"], medians["transcript"]) == ("ok", "hi")
