"""The bundled Whisper-encoder base (samples/checkpoints/whisper_tiny_ctc.nemo): small enough for the repository,
stored in float16, and a plain NeMo checkpoint that hears the sample when restored by NeMo's own API."""

import io
import json
import subprocess
import tarfile

import pytest
import torch

from duet.asr.scoring import score

BASE = "samples/checkpoints/whisper_tiny_ctc.nemo"


@pytest.fixture(scope="module")
def whisper_base(repo_root):
    path = repo_root / BASE
    if not path.is_file():
        pytest.skip(f"{BASE} missing")
    return path


def sample_test_set(repo_root):
    """(flac paths, reference texts) of the sample's test-clean, read from its LibriSpeech transcripts."""
    paths, refs = [], []
    for trans in sorted((repo_root / "samples" / "LibriSpeech" / "test-clean").rglob("*.trans.txt")):
        for line in trans.read_text().splitlines():
            uid, text = line.split(" ", 1)
            paths.append(trans.parent / f"{uid}.flac")
            refs.append(text)
    return paths, refs


def test_base_is_small_and_stored_in_float16(whisper_base):
    assert whisper_base.stat().st_size <= 20 * 1024 * 1024
    with tarfile.open(whisper_base) as archive:
        member = next(m for m in archive.getmembers() if m.name.endswith("model_weights.ckpt"))
        weights = torch.load(io.BytesIO(archive.extractfile(member).read()), map_location="cpu", weights_only=True)
    floats = {t.dtype for t in weights.values() if t.is_floating_point()}
    assert floats == {torch.float16}


@pytest.mark.integration
def test_base_restores_through_nemo_and_hears_the_sample(whisper_base, repo_root, python, tmp_path):
    """``ASRModel.restore_from(path).transcribe(files)`` in a new interpreter that never imports duet; the
    transcripts of the sample's held-out speakers are mostly right (the import's random head scores ~100 %)."""
    paths, refs = sample_test_set(repo_root)
    assert len(paths) >= 40
    code = ("import sys, json; from nemo.collections.asr.models import ASRModel; "
            "m = ASRModel.restore_from(sys.argv[1], map_location='cpu'); "
            "hyps = m.transcribe(sys.argv[2:], batch_size=8, verbose=False); "
            "print(json.dumps([h.text if hasattr(h, 'text') else h for h in hyps]))")
    result = subprocess.run([python, "-c", code, str(whisper_base), *map(str, paths)], capture_output=True,
                            text=True, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    hyps = json.loads(result.stdout.strip().splitlines()[-1])
    scored = score([p.stem for p in paths], refs, hyps, [0.0] * len(paths))
    assert scored.summary["wer"] < 0.70, scored.summary
