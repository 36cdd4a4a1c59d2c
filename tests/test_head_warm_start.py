"""The CTC head's warm start on a frozen pretrained encoder (duet/asr/head_warm_start.py): it learns (loss
falls, the held-out greedy WER drops), leaves the encoder untouched, and names bad input."""

import json

import pytest
import torch

from duet.errors import AsrInputError


@pytest.fixture(scope="module")
def imported_model(sample_tokenizer):
    from duet.asr.whisper_import import ImportSettings, build_model

    return build_model(ImportSettings(tokenizer_dir=sample_tokenizer))


def small_manifest(path, manifest, n):
    rows = [json.loads(line) for line in manifest.read_text().splitlines()[:n]]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.mark.integration  # the real Whisper encoder over 150 clips, then 300 head steps
def test_warm_start_trains_the_head_and_not_the_encoder(imported_model, sample_manifests, tmp_path):
    from duet.asr.head_warm_start import WarmStartSettings, warm_start_head

    encoder_before = {k: v.clone() for k, v in imported_model.encoder.state_dict().items()}
    settings = WarmStartSettings(manifests=(small_manifest(tmp_path / "train.json", sample_manifests["train-clean"], 120),),
                                 dev_manifest=small_manifest(tmp_path / "dev.json", sample_manifests["dev-clean"], 30),
                                 steps=300, lr=3e-3)
    report = warm_start_head(imported_model, settings)
    assert report.last_loss < 0.5 * report.first_loss
    assert report.dev_wer_after < report.dev_wer_before
    assert report.dev_wer_after < 1.0  # the random head's transcripts are all wrong; the warm one's are not
    for name, value in imported_model.encoder.state_dict().items():
        assert torch.equal(value, encoder_before[name]), name


def test_warm_start_names_a_bad_manifest_and_audio(imported_model, tmp_path):
    from duet.asr.head_warm_start import WarmStartSettings, warm_start_head

    with pytest.raises(AsrInputError, match="missing.json"):
        warm_start_head(imported_model, WarmStartSettings(manifests=(tmp_path / "missing.json",), steps=1))
    broken = tmp_path / "broken.flac"
    broken.write_bytes(b"not audio")
    manifest = tmp_path / "m.json"
    manifest.write_text(json.dumps({"audio_filepath": str(broken), "duration": 1.0, "text": "a"}) + "\n")
    with pytest.raises(AsrInputError, match="broken.flac"):
        warm_start_head(imported_model, WarmStartSettings(manifests=(manifest,), steps=1))


@pytest.mark.integration  # a subprocess that imports NeMo
def test_import_tool_refuses_a_missing_warm_start_manifest_before_building(tmp_path, sample_tokenizer, python,
                                                                            repo_root):
    import subprocess

    result = subprocess.run([python, str(repo_root / "tools" / "import_whisper.py"), "--tokenizer", str(sample_tokenizer),
                             "--out", str(tmp_path / "m.nemo"), "--warm-start", str(tmp_path / "nope.json")],
                            capture_output=True, text=True)
    assert result.returncode != 0
    assert "nope.json" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "m.nemo").exists()


@pytest.mark.integration  # the real Whisper encoder over 60 clips, then 60 steps of the adapter and head
def test_warm_start_trains_new_adapter_blocks_and_keeps_whispers_layers(sample_tokenizer, sample_manifests, tmp_path):
    from duet.asr.head_warm_start import WarmStartSettings, warm_start_head
    from duet.asr.whisper_import import ImportSettings, build_model

    model = build_model(ImportSettings(tokenizer_dir=sample_tokenizer, adapter_layers=1))
    pretrained = {id(p) for p in model.encoder.pretrained_parameters()}
    before = {name: p.detach().clone() for name, p in model.encoder.named_parameters()}
    settings = WarmStartSettings(manifests=(small_manifest(tmp_path / "train.json", sample_manifests["train-clean"], 60),),
                                 steps=60, lr=3e-3, batch_utterances=8)
    report = warm_start_head(model, settings)
    assert report.last_loss < 0.8 * report.first_loss
    for name, p in model.encoder.named_parameters():
        assert torch.equal(p, before[name]) == (id(p) in pretrained), name  # Whisper's frozen, every adapter weight moved
