"""Encoder variants (issue 7): ResMHA equivalence/gradients/save-restore, progressive-downsampling lengths."""

import json

import pytest
import torch
from omegaconf import OmegaConf

pytest.importorskip("nemo.collections.asr")

from nemo.collections.asr.models import ASRModel, EncDecCTCModelBPE  # noqa: E402
from nemo.collections.asr.modules import AudioToMelSpectrogramPreprocessor, ConformerEncoder  # noqa: E402

from duet.asr.progressive import (  # noqa: E402
    CtcLengthError,
    check_ctc_lengths,
    ctc_required_frames,
    encoder_output_lengths,
)
from duet.asr.resmha import ResidualAttentionConformerEncoder  # noqa: E402
from duet.asr.variants import VARIANTS, convert_checkpoint, hydra_overrides  # noqa: E402
from duet.data.tokenizer import train_tokenizer  # noqa: E402
from tests.script_helpers import load_script  # noqa: E402

TINY_ENCODER = dict(feat_in=80, n_layers=3, d_model=32, n_heads=4, ff_expansion_factor=2, conv_kernel_size=9,
                    subsampling="dw_striding", subsampling_factor=8, subsampling_conv_channels=16,
                    self_attention_model="rel_pos", dropout=0.1, dropout_att=0.1, dropout_pre_encoder=0.1)

SENTENCES = ["what is the weather like today", "set a timer for ten minutes", "play some music please",
             "turn off the lights in the kitchen", "how far is the moon from the earth", "remind me to call mom"]


def _features(lengths=(200, 143)):
    torch.manual_seed(0)
    return torch.randn(len(lengths), 80, max(lengths)), torch.tensor(lengths)


def _pair(**overrides):
    """A NeMo ConformerEncoder and a ResMHA-capable encoder with the same weights, both in eval mode."""
    kwargs = {**TINY_ENCODER, **overrides}
    residual = kwargs.pop("residual_attention", False)
    torch.manual_seed(1)
    plain = ConformerEncoder(**kwargs).eval()
    variant = ResidualAttentionConformerEncoder(residual_attention=residual, **kwargs).eval()
    variant.load_state_dict(plain.state_dict(), strict=True)
    return plain, variant


@pytest.mark.parametrize("overrides", [
    {},  # FastConformer: dw_striding x8, rel_pos, untied biases
    {"subsampling": "striding", "subsampling_factor": 4, "untie_biases": False},  # Conformer x4, shared biases
    {"reduction": "pooling", "reduction_position": 1, "reduction_factor": 2},
])
def test_residual_off_is_nemo_conformer_encoder(overrides):
    plain, variant = _pair(**overrides)
    x, lengths = _features()
    with torch.no_grad():
        out_plain, len_plain = plain(audio_signal=x, length=lengths)
        out_variant, len_variant = variant(audio_signal=x, length=lengths)
    assert torch.equal(len_plain, len_variant)
    assert (out_plain - out_variant).abs().max().item() <= 1e-6


@pytest.mark.parametrize("overrides", [{}, {"self_attention_model": "abs_pos"}, {"untie_biases": False}])
def test_residual_on_changes_outputs_and_trains_every_attention_parameter(overrides):
    plain, variant = _pair(residual_attention=True, **overrides)
    assert sum(p.numel() for p in variant.parameters()) == sum(p.numel() for p in plain.parameters())
    x, lengths = _features()
    with torch.no_grad():
        out_plain, _ = plain(audio_signal=x, length=lengths)
    out, out_len = variant(audio_signal=x, length=lengths)
    valid = torch.arange(out.size(-1)) < out_len[:, None]  # padded frames are not comparable
    diff = (out - out_plain).abs().transpose(1, 2)[valid]
    assert diff.max().item() > 1e-3, "residual attention logits left the encoder output unchanged"
    # The first layer's attention output is the plain one: the carried scores start at its second layer.
    out.sum().backward()
    for i, layer in enumerate(variant.layers):
        for name, param in layer.self_attn.named_parameters():
            assert param.grad is not None and torch.isfinite(param.grad).all(), f"layer {i} {name}: no gradient"
            assert param.grad.abs().sum() > 0, f"layer {i} {name}: zero gradient"


def test_residual_scores_reach_later_layers_only():
    """Layer 0 is unchanged; from layer 1 on each layer's softmax input adds the previous layer's."""
    plain, variant = _pair(residual_attention=True, n_layers=2)
    seen_plain, seen_variant = [], []
    for model, seen in ((plain, seen_plain), (variant, seen_variant)):
        for layer in model.layers:
            layer.self_attn.register_forward_hook(lambda m, args, kwargs, out, s=seen: s.append(out),
                                                  with_kwargs=True)
    x, lengths = _features((160, 160))
    with torch.no_grad():
        plain(audio_signal=x, length=lengths)
        variant(audio_signal=x, length=lengths)
    assert (seen_plain[0] - seen_variant[0]).abs().max() <= 1e-6
    assert (seen_plain[1] - seen_variant[1]).abs().max() > 1e-4
    assert variant._residual_scores.previous is None, "scores of the last batch were kept alive"


def test_residual_with_reduction_restarts_the_chain():
    plain, variant = _pair(residual_attention=True, reduction="pooling", reduction_position=1, reduction_factor=2)
    x, lengths = _features()
    with torch.no_grad():
        out_plain, len_plain = plain(audio_signal=x, length=lengths)
        out, out_len = variant(audio_signal=x, length=lengths)
    assert out.shape == out_plain.shape and torch.equal(out_len, len_plain)


def test_residual_refuses_sdpa_and_local_attention():
    with pytest.raises(ValueError, match="use_pytorch_sdpa"):
        ResidualAttentionConformerEncoder(residual_attention=True, use_pytorch_sdpa=True, **TINY_ENCODER)
    local = {**TINY_ENCODER, "self_attention_model": "rel_pos_local_attn", "att_context_size": [8, 8]}
    with pytest.raises(ValueError, match="rel_pos_local_attn"):
        ResidualAttentionConformerEncoder(residual_attention=True, **local)


# --- .nemo save/restore ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_tokenizer(tmp_path_factory):
    return train_tokenizer(SENTENCES, tmp_path_factory.mktemp("tok") / "spe_bpe_v40", vocab_size=40)


def _model_cfg(tokenizer_dir, encoder: dict):
    return OmegaConf.create({
        "sample_rate": 16000,
        "train_ds": None, "validation_ds": None, "test_ds": None,
        "tokenizer": {"dir": str(tokenizer_dir), "type": "bpe"},
        "preprocessor": {"_target_": "nemo.collections.asr.modules.AudioToMelSpectrogramPreprocessor",
                         "sample_rate": 16000, "features": 80, "n_fft": 512, "window_size": 0.025,
                         "window_stride": 0.01, "normalize": "per_feature", "dither": 0.0, "pad_to": 0},
        "spec_augment": None,
        "encoder": {"_target_": "nemo.collections.asr.modules.ConformerEncoder", **TINY_ENCODER, **encoder},
        "decoder": {"_target_": "nemo.collections.asr.modules.ConvASRDecoder", "feat_in": TINY_ENCODER["d_model"],
                    "num_classes": -1, "vocabulary": []},
        "optim": None,
    })


def _transcribe_logits(model, seed=3):
    torch.manual_seed(seed)
    audio = torch.randn(2, 16000)
    with torch.no_grad():
        log_probs, lengths, _ = model.eval()(input_signal=audio, input_signal_length=torch.tensor([16000, 12000]))
    return log_probs, lengths


def test_resmha_model_saves_and_restores_through_nemo_file(tiny_tokenizer, tmp_path):
    cfg = _model_cfg(tiny_tokenizer, {"_target_": "duet.asr.resmha.ResidualAttentionConformerEncoder",
                                      "residual_attention": True})
    torch.manual_seed(0)
    model = EncDecCTCModelBPE(cfg=cfg)
    before, len_before = _transcribe_logits(model)
    path = tmp_path / "resmha.nemo"
    model.save_to(str(path))
    restored = ASRModel.restore_from(str(path), map_location="cpu")
    assert isinstance(restored.encoder, ResidualAttentionConformerEncoder) and restored.encoder.residual_attention
    after, len_after = _transcribe_logits(restored)
    assert torch.equal(len_before, len_after)
    assert (before - after).abs().max().item() <= 1e-6


@pytest.mark.parametrize("variant", ["resmha", "progressive", "resmha+progressive"])
def test_plain_checkpoint_converts_to_every_variant(tiny_tokenizer, tmp_path, variant):
    torch.manual_seed(0)
    base = EncDecCTCModelBPE(cfg=_model_cfg(tiny_tokenizer, {}))
    base_path = tmp_path / "base.nemo"
    base.save_to(str(base_path))
    out = tmp_path / f"{variant}.nemo"
    reinitialised = convert_checkpoint(base_path, variant, out)
    converted = ASRModel.restore_from(str(out), map_location="cpu")
    assert isinstance(converted.encoder, ResidualAttentionConformerEncoder) == ("resmha" in variant)
    base_state, converted_state = base.state_dict(), converted.state_dict()
    if "progressive" in variant:
        # 8x -> 4x front end: one strided stage less, the others keep their shapes and carry over; only the
        # projection of the twice-as-wide output is new (its bias keeps its shape and carries over).
        assert set(converted_state) <= set(base_state)
        assert reinitialised == ["pre_encode.out.weight"]
        dropped = set(base_state) - set(converted_state)  # the third strided stage of the 8x front end
        assert dropped and all(k.startswith("encoder.pre_encode.conv.") for k in dropped)
        assert converted.encoder.subsampling_factor == 4 and converted.encoder.reduction_position == 0
    else:
        assert reinitialised == [] and base_state.keys() == converted_state.keys()
    carried = [k for k in converted_state if k != "encoder.pre_encode.out.weight"]
    assert all(torch.equal(base_state[k], converted_state[k]) for k in carried)
    logits, lengths = _transcribe_logits(converted)
    base_logits, base_lengths = _transcribe_logits(base)
    assert (lengths - base_lengths).abs().max() <= 1  # 40 ms -> 80 ms ends at the baseline's frame rate
    if variant == "resmha":
        assert (logits - base_logits).abs().max() > 1e-4


def test_hydra_overrides_add_missing_keys_with_plus():
    overrides = hydra_overrides("resmha+progressive", {"_target_": "x", "n_layers": 16, "subsampling_factor": 8})
    assert "model.encoder._target_=duet.asr.resmha.ResidualAttentionConformerEncoder" in overrides
    assert "+model.encoder.residual_attention=true" in overrides
    assert "+model.encoder.reduction_position=7" in overrides
    assert "model.encoder.subsampling_factor=4" in overrides
    assert set(VARIANTS) == {"baseline", "resmha", "progressive", "resmha+progressive"}


# --- progressive downsampling: output lengths and the CTC check ----------------------------------

@pytest.mark.parametrize("encoder", [
    {},  # dw_striding x8
    {"reduction": "pooling", "reduction_position": 1, "reduction_factor": 2},  # 80 -> 160 ms
    {"subsampling": "striding", "subsampling_factor": 4, "reduction": "striding", "reduction_position": 0,
     "reduction_factor": 2},  # Conformer 40 -> 80 ms with a strided-conv reduction
    {"reduction": "pooling", "reduction_position": -1, "reduction_factor": 2},
])
def test_output_length_arithmetic_matches_a_real_forward_pass(encoder):
    torch.manual_seed(0)
    preprocessor = AudioToMelSpectrogramPreprocessor(sample_rate=16000, features=80, dither=0.0, pad_to=0).eval()
    model = ConformerEncoder(**{**TINY_ENCODER, **encoder}).eval()
    samples = torch.tensor([16000, 15999, 11520, 8001, 4321, 1280])
    audio = torch.randn(len(samples), int(samples.max()))
    with torch.no_grad():
        features, feature_len = preprocessor(input_signal=audio, length=samples)
        out, out_len = model(audio_signal=features, length=feature_len)
    predicted = encoder_output_lengths(preprocessor, model, samples)
    assert predicted.tolist() == out_len.tolist()
    assert out.size(-1) == int(predicted.max())


def test_ctc_required_frames_counts_a_blank_between_repeats():
    assert ctc_required_frames([]) == 0
    assert ctc_required_frames([5, 6, 7]) == 3
    assert ctc_required_frames([5, 5, 6, 6, 6]) == 5 + 3


def _write_manifest(path, rows):
    path.write_text("".join(json.dumps({"audio_filepath": f"/data/{uid}.flac", "duration": d, "text": t}) + "\n"
                            for uid, d, t in rows))
    return path


def test_ctc_length_check_names_the_utterance_that_cannot_fit(tiny_tokenizer, tmp_path):
    model_cfg = _model_cfg(tiny_tokenizer, {"reduction": "pooling", "reduction_position": 1, "reduction_factor": 2})
    ok = _write_manifest(tmp_path / "ok.json", [("long", 6.0, SENTENCES[0]), ("mid", 3.5, SENTENCES[2])])
    report = check_ctc_lengths(model_cfg, ok, tiny_tokenizer)
    assert report.utterances == 2 and report.frame_ms == 160.0
    assert report.tightest_frames >= report.tightest_required
    bad = _write_manifest(tmp_path / "bad.json", [("long", 6.0, SENTENCES[0]),
                                                  ("rushed", 1.2, "turn off the lights in the kitchen")])
    with pytest.raises(CtcLengthError, match=r"rushed\.flac.*outputs 7 frames but CTC needs \d+"):
        check_ctc_lengths(model_cfg, bad, tiny_tokenizer)
    # The same utterance fits at the baseline's 80 ms frames only if its tokens do: the check is per config.
    baseline_frames = check_ctc_lengths(_model_cfg(tiny_tokenizer, {}), ok, tiny_tokenizer).tightest_frames
    assert baseline_frames >= 2 * report.tightest_frames - 1


def test_variant_configs_compose_and_keep_the_parameter_count(repo_root):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(repo_root / "configs"), version_base=None):
        plain = compose("fastconformer_small")
        resmha = compose("fastconformer_small_resmha")
        progressive = compose("fastconformer_small_progressive")
    counts = {}
    for name, cfg in (("plain", plain), ("resmha", resmha), ("progressive", progressive)):
        encoder_cfg = OmegaConf.to_container(cfg.model.encoder, resolve=True)
        encoder = EncDecCTCModelBPE.from_config_dict(OmegaConf.create(encoder_cfg))
        counts[name] = sum(p.numel() for p in encoder.parameters())
    assert isinstance(encoder, ConformerEncoder) and encoder.reduction_position == 7
    assert encoder.subsampling_factor == 4
    assert counts["plain"] == counts["resmha"]
    assert 12.4e6 < counts["plain"] < 12.8e6
    assert 0 < counts["progressive"] - counts["plain"] < 0.5e6  # wider front-end projection only


# --- the A/B script ---------------------------------------------------------------------------------

def _load_ab_script(repo_root):
    return load_script(repo_root / "bench" / "asr_variants_ab.py")


def _sample_inputs(manifests: dict, tokenizer) -> list[str]:
    return ["--train", str(manifests["train-clean"]), "--dev", str(manifests["dev-clean"]),
            "--test", str(manifests["test-clean"]), "--tokenizer", str(tokenizer)]


@pytest.mark.integration
def test_ab_check_only_rejects_a_160ms_config_on_the_sample(repo_root, capsys, sample_manifests, sample_tokenizer):
    ab = _load_ab_script(repo_root)
    common = ["--from-scratch", "--check-only", "--config-name", "fastconformer_tiny",
              *_sample_inputs(sample_manifests, sample_tokenizer)]
    assert ab.main([*common, "--variants", "baseline", "progressive"]) == 0
    too_coarse = ["+model.encoder.reduction=pooling", "+model.encoder.reduction_position=2",
                  "+model.encoder.reduction_factor=2"]
    assert ab.main([*common, "--variants", "baseline", "--", *too_coarse]) == 1
    out = capsys.readouterr().out
    assert "CTC impossible" in out and "frames but CTC needs" in out


@pytest.mark.slow
def test_ab_runs_the_recipe_for_each_variant_and_writes_the_table(repo_root, tmp_path, sample_manifests,
                                                                  sample_tokenizer):
    ab = _load_ab_script(repo_root)
    rc = ab.main(["--from-scratch", "--config-name", "fastconformer_tiny", "--variants", "baseline", "resmha",
                  "--max-steps", "3", "--out", str(tmp_path), *_sample_inputs(sample_manifests, sample_tokenizer),
                  "--", "model.train_ds.batch_size=4", "evaluate_before_fit=false"])
    assert rc == 0
    results = json.loads((tmp_path / "ab_results.json").read_text())
    assert [r["variant"] for r in results] == ["baseline", "resmha"] and all(r["steps"] == 3 for r in results)
    assert results[0]["params"] == results[1]["params"]
    table = (tmp_path / "ab_table.md").read_text()
    assert "| baseline |" in table and "| resmha |" in table
    restored = ASRModel.restore_from(results[1]["model"], map_location="cpu")
    assert isinstance(restored.encoder, ResidualAttentionConformerEncoder) and restored.encoder.residual_attention
