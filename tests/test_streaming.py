"""Cache-aware streaming (issue 6): a tiny random-weight model built from configs/fastconformer_small_streaming.yaml.

Random weights emit a token on most frames, so equality with offline decoding is a strict check: any
frame computed differently in streaming (cache, chunk edges, the last partial chunk) changes the text.
"""

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

pytest.importorskip("nemo.collections.asr")

from duet.asr.streaming import (  # noqa: E402
    StreamingModelError,
    check_streaming_model,
    stream_transcribe,
    streaming_latency,
    transcribe_streaming,
)
from tests.asr_helpers import TINY_STREAMING, build_ctc_model  # noqa: E402
from tests.audio_fixtures import write_tone  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def model(tiny_streaming_model):
    return tiny_streaming_model


def offline(model, audio: np.ndarray):
    """Greedy labels per encoder frame and transcript of the full-utterance forward pass."""
    with torch.inference_mode():
        log_probs, lengths, greedy = model.forward(
            input_signal=torch.from_numpy(audio)[None], input_signal_length=torch.tensor([len(audio)])
        )
        text = model.decoding.ctc_decoder_predictions_tensor(log_probs, decoder_lengths=lengths)[0].text
    return greedy[0, : lengths[0]].tolist(), text


def sample_file(tmp_path: Path) -> Path:
    """A bundled test-clean utterance, or a written tone when samples/ is absent."""
    bundled = sorted((REPO_ROOT / "samples" / "LibriSpeech" / "test-clean").rglob("*.flac"))
    if bundled:
        return bundled[0]
    path = tmp_path / "tone.flac"
    write_tone(path, 3.3)
    return path


def test_streaming_a_file_equals_offline_decoding_and_partials_come_early(model, tmp_path):
    from duet.asr.inference import load_audio

    path = sample_file(tmp_path)
    audio = load_audio(path, 16000)
    duration = len(audio) / 16000
    final_text, partials = transcribe_streaming(model, path)
    labels, text = offline(model, audio)
    assert partials[-1].frame_labels == labels
    assert final_text == text and text.strip(), "random weights should emit some tokens"
    assert [p.is_final for p in partials] == [False] * (len(partials) - 1) + [True]
    early = [p for p in partials if p.audio_seconds < duration]
    assert len(early) >= 2 and any(p.text for p in early), "no partial transcript before the end of the audio"
    for p in partials:  # cache-aware streaming never revises frames it has emitted
        assert p.frame_labels == labels[: len(p.frame_labels)]
    assert [p.audio_seconds for p in partials] == sorted(p.audio_seconds for p in partials)
    assert partials[-1].audio_seconds == pytest.approx(duration, abs=0.02)


# lengths that end a chunk exactly, leave a remainder shorter than one subsampling window, or fit in one chunk
@pytest.mark.parametrize("samples", [3000, 8000, 16160, 17280, 20000, 44247])
def test_streaming_equals_offline_at_chunk_edges(model, samples):
    audio = (0.1 * np.random.default_rng(samples).standard_normal(samples)).astype(np.float32)
    labels, text = offline(model, audio)
    final = list(stream_transcribe(model, audio))[-1]
    assert final.frame_labels == labels
    assert final.text == text


def test_latency_matches_nemo_chunking(model):
    latency = streaming_latency(model)
    assert (latency.lookahead_frames, latency.frame_ms) == (6, 80.0)
    assert latency.lookahead_ms == 480.0 and latency.chunk_ms == 560.0
    model.encoder.setup_streaming_params()
    chunk = model.encoder.streaming_cfg.chunk_size
    # NeMo's chunk after the first, in 10 ms feature frames, is the audio one step consumes
    assert (chunk[1] if isinstance(chunk, list) else chunk) * 10.0 == latency.chunk_ms


def test_offline_model_and_beam_decoding_are_refused(model):
    offline_cfg = SimpleNamespace(
        encoder={"att_context_style": "regular", "conv_context_size": None, "causal_downsampling": False},
        decoding=SimpleNamespace(strategy="greedy_batch"),
    )
    with pytest.raises(StreamingModelError, match="att_context_style=regular.*causal_downsampling=false"):
        check_streaming_model(SimpleNamespace(encoder=model.encoder, cfg=offline_cfg))
    beam_cfg = SimpleNamespace(encoder=model.cfg.encoder, decoding=SimpleNamespace(strategy="beam_batch"))
    with pytest.raises(StreamingModelError, match="greedily"):
        check_streaming_model(SimpleNamespace(encoder=model.encoder, cfg=beam_cfg))


def test_offline_checkpoint_converts_to_a_streaming_model_with_its_weights(model, tmp_path):
    from duet.asr.streaming import convert_to_streaming

    offline_model = build_ctc_model("fastconformer_small", model.cfg.tokenizer.dir, TINY_STREAMING, seed=2)
    with pytest.raises(StreamingModelError, match="not trained for streaming"):
        check_streaming_model(offline_model)
    offline_model.save_to(str(tmp_path / "offline.nemo"))

    streaming, reinitialised = convert_to_streaming(tmp_path / "offline.nemo", tmp_path / "streaming.nemo",
                                                    att_context_size=[40, 3])
    # causal subsampling widens the projection after the convs; nothing else may start from scratch
    assert reinitialised == ["encoder.pre_encode.out.weight"]
    assert (tmp_path / "streaming.nemo").is_file()
    check_streaming_model(streaming)
    assert list(streaming.encoder.att_context_size) == [40, 3] and streaming_latency(streaming).lookahead_ms == 240.0
    before, after = offline_model.state_dict(), streaming.state_dict()
    dropped = set(before) - set(after)
    assert dropped and all(k.split(".")[-1] in ("running_mean", "running_var", "num_batches_tracked") for k in dropped)
    assert set(after) <= set(before)
    assert all(torch.equal(before[k], after[k]) for k in after if k not in reinitialised)
    audio = (0.1 * np.random.default_rng(7).standard_normal(30000)).astype(np.float32)
    assert list(stream_transcribe(streaming, audio))[-1].frame_labels == offline(streaming, audio)[0]


def test_convert_cli_writes_a_streaming_model_and_names_a_missing_file(model, tmp_path, capsys, repo_root):
    import importlib.util

    spec = importlib.util.spec_from_file_location("convert_to_streaming", repo_root / "tools" / "convert_to_streaming.py")
    cli = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cli)
    offline_model = build_ctc_model("fastconformer_small", model.cfg.tokenizer.dir, TINY_STREAMING, seed=2)
    offline_model.save_to(str(tmp_path / "offline.nemo"))
    assert cli.main([str(tmp_path / "offline.nemo"), str(tmp_path / "streaming.nemo"), "--att-context-size", "40", "3"]) == 0
    assert "look-ahead 240 ms" in capsys.readouterr().out and (tmp_path / "streaming.nemo").is_file()
    assert cli.main([str(tmp_path / "nope.nemo"), str(tmp_path / "x.nemo")]) == 2
    assert "nope.nemo" in capsys.readouterr().err and not (tmp_path / "x.nemo").exists()
