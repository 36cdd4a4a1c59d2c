"""Pure helpers of bench/asr_speed.py (timings are never asserted)."""

import sys

import pytest

from tests.script_helpers import load_script


@pytest.fixture(scope="module")
def bench(repo_root):
    return load_script(repo_root / "bench" / "asr_speed.py")


def test_throughput_counts_padding_over_all_batch_samples(bench):
    stats = bench.Throughput(sample_rate=4)
    stats.add([8, 4], padded_length=8, wall_s=1.0, cpu_s=0.5)  # 4 of 16 samples are padding
    stats.add([6, 6, 6], padded_length=6, wall_s=2.0, cpu_s=1.0)  # none of 18
    assert stats.audio_s == pytest.approx(30 / 4)
    assert stats.padding_fraction == pytest.approx(4 / 34)
    summary = stats.summary()
    assert summary["audio_s_per_wall_s"] == pytest.approx(7.5 / 3.0)
    assert summary["audio_s_per_cpu_s"] == pytest.approx(7.5 / 1.5)
    assert summary["utterances_per_batch"] == pytest.approx(2.5)


@pytest.mark.parametrize("option", [["--rounds", "0"], ["--train-steps", "0"], ["--splits", "test_clean"]])
def test_bad_options_are_one_line_errors(option, python, repo_root):
    import subprocess

    result = subprocess.run([python, "bench/asr_speed.py", *option], cwd=repo_root, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode != 0 and option[0] in result.stderr and "Traceback" not in result.stderr


def test_cpu_seconds_count_finished_child_processes(bench):
    import subprocess
    import time

    before, own = bench.cpu_seconds(), time.process_time()
    subprocess.run([sys.executable, "-c", "sum(i * i for i in range(20_000_000))"], check=True)
    # the child's work (our transcription's worker processes, here a busy interpreter) counts once it is reaped
    assert bench.cpu_seconds() - before > 0.2 and time.process_time() - own < 0.1
