"""The bundled Whisper-encoder base (samples/checkpoints/whisper_tiny_ctc.nemo): small enough for the repository,
stored in float16, and a plain NeMo checkpoint that hears the sample when restored by NeMo's own API."""

import io
import json
import subprocess
import tarfile

import numpy as np
import pytest
import soundfile
import torch

from duet.asr.scoring import score
from duet.data.manifest import read_manifest

BASE = "samples/checkpoints/whisper_tiny_ctc.nemo"


@pytest.fixture(scope="module")
def whisper_base(repo_root):
    path = repo_root / BASE
    if not path.is_file():
        pytest.skip(f"{BASE} missing")
    return path


def test_base_is_small_and_stored_in_float16(whisper_base):
    assert whisper_base.stat().st_size <= 20 * 1024 * 1024
    with tarfile.open(whisper_base) as archive:
        member = next(m for m in archive.getmembers() if m.name.endswith("model_weights.ckpt"))
        weights = torch.load(io.BytesIO(archive.extractfile(member).read()), map_location="cpu", weights_only=True)
    floats = {t.dtype for t in weights.values() if t.is_floating_point()}
    assert floats == {torch.float16}


@pytest.mark.integration
def test_base_restores_through_nemo_and_hears_the_sample(whisper_base, sample_manifests, python, tmp_path):
    """``ASRModel.restore_from(path).transcribe(files)`` in a new interpreter that never imports duet; the
    transcripts of the sample's held-out speakers are mostly right (the import's random head scores ~100 %), and so
    is that of a recording of them longer than Whisper's 30 s window (it raised before the encoder windowed it)."""
    entries = read_manifest(sample_manifests["test-clean"])
    paths = [e["audio_filepath"] for e in entries]
    assert len(paths) >= 40
    # one recording longer than Whisper's 30 s window: the encoder reads it in overlapping windows itself
    joined, seconds = [], 0.0
    for e in entries:
        joined.append(e)
        seconds += float(e["duration"])
        if seconds > 35:
            break
    long_file = tmp_path / "long.flac"
    soundfile.write(long_file, np.concatenate([soundfile.read(e["audio_filepath"], dtype="float32")[0] for e in joined]),
                    16000)
    code = ("import sys, json; from nemo.collections.asr.models import ASRModel; "
            "m = ASRModel.restore_from(sys.argv[1], map_location='cpu'); "
            "hyps = m.transcribe(sys.argv[2:], batch_size=8, verbose=False); "
            "print(json.dumps([h.text if hasattr(h, 'text') else h for h in hyps]))")
    result = subprocess.run([python, "-c", code, str(whisper_base), *paths, str(long_file)], capture_output=True,
                            text=True, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    *hyps, long_hyp = json.loads(result.stdout.strip().splitlines()[-1])
    long_scored = score(["long"], [" ".join(e["text"] for e in joined)], [long_hyp], [seconds])
    assert long_scored.summary["wer"] < 0.70, long_scored.summary
    scored = score(paths, [e["text"] for e in entries], hyps, [float(e["duration"]) for e in entries])
    assert scored.summary["wer"] < 0.70, scored.summary
