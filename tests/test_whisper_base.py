"""The bundled Whisper-encoder base (samples/checkpoints/whisper_tiny_ctc.nemo): small enough for the repository,
stored in float16, and a plain NeMo checkpoint that hears the sample when restored by NeMo's own API."""

import io
import json
import subprocess
import tarfile

import pytest
import torch

from duet.asr.scoring import score
from duet.manifest import read_manifest

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
    transcripts of the sample's held-out speakers are mostly right (the import's random head scores ~100 %)."""
    entries = read_manifest(sample_manifests["test-clean"])
    paths = [e["audio_filepath"] for e in entries]
    assert len(paths) >= 40
    code = ("import sys, json; from nemo.collections.asr.models import ASRModel; "
            "m = ASRModel.restore_from(sys.argv[1], map_location='cpu'); "
            "hyps = m.transcribe(sys.argv[2:], batch_size=8, verbose=False); "
            "print(json.dumps([h.text if hasattr(h, 'text') else h for h in hyps]))")
    result = subprocess.run([python, "-c", code, str(whisper_base), *paths], capture_output=True,
                            text=True, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    hyps = json.loads(result.stdout.strip().splitlines()[-1])
    scored = score(paths, [e["text"] for e in entries], hyps, [float(e["duration"]) for e in entries])
    assert scored.summary["wer"] < 0.70, scored.summary
