"""bench/long_recordings.py: the long recordings it joins from utterances, and its refusals."""

import numpy as np
import pytest
import soundfile as sf

from duet.errors import DuetError
from tests.script_helpers import load_script


@pytest.fixture(scope="module")
def bench(repo_root):
    return load_script(repo_root / "bench" / "long_recordings.py")


def test_utterances_are_joined_with_silence_until_the_length_asked(bench, tmp_path):
    entries = []
    for k, seconds in enumerate([2.0, 3.0, 4.0]):
        path = tmp_path / f"u{k}.flac"
        sf.write(path, np.full(int(seconds * 16000), 0.1 * (k + 1), dtype=np.float32), 16000)
        entries.append({"audio_filepath": str(path), "duration": seconds, "text": f"word{k} said"})
    joined = bench.join_utterances(entries, 5.0, 0.5, tmp_path / "out" / "long.flac")
    audio, rate = sf.read(joined["audio_filepath"], dtype="float32")
    # the first two reach 2 + 0.5 + 3 = 5.5 s: the third is not needed, and no silence trails the last
    assert rate == 16000 and len(audio) == int(5.5 * 16000) and joined["duration"] == 5.5
    assert joined["text"] == "word0 said word1 said" and len(joined["utterances"]) == 2
    assert np.all(audio[32000:40000] == 0) and audio[40000] == pytest.approx(0.2, abs=1e-3)
    # the silence after the last utterance is not counted: 2 + 0.5 + 3 = 5.5 s does not reach 5.6
    assert bench.join_utterances(entries, 5.6, 0.5, tmp_path / "out" / "longer.flac")["duration"] == 10.0
    with pytest.raises(DuetError, match="less than --seconds 60"):
        bench.join_utterances(entries, 60.0, 0.5, tmp_path / "too_long.flac")
    assert not (tmp_path / "too_long.flac").exists()


def test_bad_arguments_are_one_line_errors(bench, tmp_path, capsys):
    assert bench.main(["--model", str(tmp_path / "missing.nemo")]) == 2
    assert capsys.readouterr().err.strip() == f"long_recordings: error: --model: no such file: {tmp_path / 'missing.nemo'}"
    (tmp_path / "m.nemo").write_bytes(b"x")
    assert bench.main(["--model", str(tmp_path / "m.nemo"), "--seconds", "0"]) == 2
    assert "every --seconds > 0" in capsys.readouterr().err
