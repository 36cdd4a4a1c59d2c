"""bench/pipeline_latency.py: its option checks and the helpers behind the table (timings are never asserted)."""

from types import SimpleNamespace

import pytest
import soundfile

from tests.script_helpers import load_script


@pytest.fixture(scope="module")
def bench(repo_root):
    return load_script(repo_root / "bench" / "pipeline_latency.py")


@pytest.mark.parametrize("option, message", [
    (["--repeats", "0"], "--repeats must be >= 1"),
    (["--seconds", "0"], "--seconds must be >= 0.5"),
    (["--threads", "0"], "--threads must be >= 1"),
    (["--asr-model", "no/such/model.nemo"], "--asr-model no/such/model.nemo not found"),
    (["--asr-tokenizer", "no/such/tokenizer"], "--asr-tokenizer no/such/tokenizer not found"),
    (["--asr-decoding", "beam_lm"], "--asr-decoding beam_lm needs --lm"),
    (["--asr-model", "{tmp}/broken.nemo"], "{tmp}/broken.nemo: cannot load it as a NeMo .nemo checkpoint"),
    (["--manifest", "{tmp}/none.json"], "--manifest {tmp}/none.json not found"),
])
def test_bad_options_are_one_line_errors(bench, option, message, sample_manifests, tmp_path, capsys):
    (tmp_path / "broken.nemo").write_bytes(b"not a tar archive" * 50)
    option, message = [word.format(tmp=tmp_path) for word in option], message.format(tmp=tmp_path)
    # paths that exist for everything the case is not about (a clean clone has no demo outputs)
    others = ["--asr-model", str(tmp_path), "--slm-model", str(tmp_path), "--asr-tokenizer", str(tmp_path),
              "--manifest", str(sample_manifests["test-clean"])]
    try:
        code = bench.main([*others, *option])
    except SystemExit as e:  # argparse's own errors
        code = e.code
    err = capsys.readouterr().err.strip()
    assert code == 2 and message in err.splitlines()[-1], err  # argparse prints its usage above


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
