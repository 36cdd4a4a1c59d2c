"""Cache-aware streaming (issue 6): a tiny random-weight model built from configs/fastconformer_small_streaming.yaml.

Random weights emit a token on most frames, so equality with offline decoding is a strict check: any
frame computed differently in streaming (cache, chunk edges, the last partial chunk, the incremental
features) changes the text. The config's ``normalize: NA`` makes streaming equal offline decoding; a
``per_feature`` variant checks the running statistics that replace utterance normalisation.
"""

import itertools
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

pytest.importorskip("nemo.collections.asr")

from duet.asr.inference import AsrInputError  # noqa: E402
from duet.asr.streaming import (  # noqa: E402
    StreamingModelError,
    StreamingSession,
    check_streaming_model,
    stream_transcribe,
    streaming_latency,
    transcribe_streaming,
)
from tests.asr_helpers import TINY_STREAMING, build_ctc_model  # noqa: E402
from tests.audio_fixtures import write_tone  # noqa: E402
from tests.script_helpers import load_script  # noqa: E402

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


# lengths that end a chunk exactly, leave a remainder shorter than one subsampling window, or fit in one chunk;
# 16896: the second chunk completes with the input's last sample, so finish() has nothing left to decode
@pytest.mark.parametrize("samples", [3000, 8000, 16160, 16896, 17280, 20000, 44247])
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
    # the checkpoint's preprocessor is kept: per_feature, streamed with running statistics (checked below
    # against the full-context encoder), so the frames, not their labels, match offline decoding's
    assert streaming.cfg.preprocessor.normalize == "per_feature"
    final = list(stream_transcribe(streaming, audio))[-1]
    assert final.is_final and len(final.frame_labels) == len(offline(streaming, audio)[0])


def test_convert_cli_writes_a_streaming_model_and_names_a_missing_file(model, tmp_path, capsys, repo_root):
    cli = load_script(repo_root / "tools" / "convert_to_streaming.py")
    offline_model = build_ctc_model("fastconformer_small", model.cfg.tokenizer.dir, TINY_STREAMING, seed=2)
    offline_model.save_to(str(tmp_path / "offline.nemo"))
    assert cli.main([str(tmp_path / "offline.nemo"), str(tmp_path / "streaming.nemo"), "--att-context-size", "40", "3"]) == 0
    assert "look-ahead 240 ms" in capsys.readouterr().out and (tmp_path / "streaming.nemo").is_file()
    assert cli.main([str(tmp_path / "nope.nemo"), str(tmp_path / "x.nemo")]) == 2
    assert "nope.nemo" in capsys.readouterr().err and not (tmp_path / "x.nemo").exists()


# ---------------------------------------------------------------- incremental features: StreamingSession (issue 21)


@pytest.fixture(scope="module")
def per_feature_model(tiny_streaming_model):
    """``tiny_streaming_model``'s architecture with ``normalize: per_feature`` (utterance statistics, as models
    converted from an offline checkpoint have): streamed with running statistics. Seed 3: weights that emit
    varied tokens on normalised features."""
    return build_ctc_model("fastconformer_small_streaming", tiny_streaming_model.cfg.tokenizer.dir,
                           TINY_STREAMING + ["model.preprocessor.normalize=per_feature"], seed=3)


def speech(tmp_path) -> np.ndarray:
    from duet.asr.inference import load_audio

    return load_audio(sample_file(tmp_path), 16000)


def session_partials(model, audio: np.ndarray, pieces) -> list[tuple]:
    """Every partial of a session fed ``audio`` cut at the sizes ``pieces`` yields (the rest in one piece)."""
    session = StreamingSession(model)
    partials, start = [], 0
    for size in pieces:
        if start >= len(audio):
            break
        partials += session.feed(audio[start: start + size])
        start += size
    partials += session.feed(audio[start:])
    partials += session.finish()
    return [(p.text, p.chunk_index, p.audio_seconds, p.is_final, p.frame_labels) for p in partials]


@pytest.mark.parametrize("normalize", ["NA", "per_feature"])
def test_partials_do_not_depend_on_how_the_audio_is_cut(model, per_feature_model, normalize, tmp_path):
    model = model if normalize == "NA" else per_feature_model
    audio = speech(tmp_path)[:40000]  # 2.5 s: five chunks, the last one short
    whole = session_partials(model, audio, [])
    assert len(whole) >= 4 and whole[-1][3] and not any(p[3] for p in whole[:-1])
    rng = np.random.default_rng(0)
    # one sample at a time up to past the first chunk (7936 samples), then larger pieces: 1 s, 100, 0.37 s, random
    for pieces in (itertools.chain(itertools.repeat(1, 9000), itertools.repeat(16000)), itertools.repeat(100),
                   itertools.repeat(5920), iter(rng.integers(1, 9000, size=100))):
        assert session_partials(model, audio, pieces) == whole


def test_a_chunk_is_decoded_as_soon_as_its_last_feature_frame_has_arrived(model, tmp_path):
    audio = speech(tmp_path)
    session = StreamingSession(model)
    first_chunk = model.encoder.streaming_cfg.chunk_size[0]
    # the first chunk's last frame (first_chunk - 1) is centred on sample (first_chunk - 1) * 160 and its
    # 512-point window reaches 256 samples beyond: 7936 samples (496 ms) in all
    needed = (first_chunk - 1) * 160 + 256
    assert not session.feed(audio[: needed - 1])
    (partial,) = session.feed(audio[needed - 1: needed])
    assert partial.chunk_index == 0 and not partial.is_final
    assert partial.audio_seconds == pytest.approx(first_chunk * 0.01)
    session.finish()
    with pytest.raises(AsrInputError, match="finished"):
        session.feed(audio[:10])
    (empty,) = StreamingSession(model).finish()  # no audio at all: still exactly one final partial
    assert empty.is_final and empty.text == "" and empty.frame_labels == []


def test_incremental_features_equal_the_whole_file_features_frame_for_frame(model, tmp_path):
    from duet.asr.streaming import IncrementalFeatures

    audio = speech(tmp_path)
    features = IncrementalFeatures(model, keep_normalization=True)
    with torch.inference_mode():
        whole, length = features.preprocessor(input_signal=torch.from_numpy(audio)[None],
                                              length=torch.tensor([len(audio)]))
    whole = whole[:, :, : int(length[0])]
    blocks, rng, start = [], np.random.default_rng(1), 0
    while start < len(audio):
        size = int(rng.integers(1, 4000))
        features.add(audio[start: start + size])
        start += size
        if features.frames_ready() > features.frames_done + 30:
            blocks.append(features.compute(features.frames_ready()))
    blocks.append(features.compute(features.total_frames(), final=True))
    assert len(blocks) > 5
    # the same float operations on the same samples: equal to rounding (0.0 measured on CPU)
    torch.testing.assert_close(torch.cat(blocks, -1), whole, atol=1e-5, rtol=0)
    held = sum(piece.size for piece in features._pieces)
    assert held < 1024, f"{held} samples still held: only the last STFT windows' worth is needed"


def test_running_normalisation_is_nemos_per_feature_over_every_prefix(per_feature_model, tmp_path):
    from nemo.collections.asr.parts.preprocessing.features import normalize_batch

    from duet.asr.streaming import IncrementalFeatures, RunningFeatureNormalization

    audio = speech(tmp_path)
    features = IncrementalFeatures(per_feature_model, keep_normalization=False)
    features.add(audio)
    total = features.total_frames()
    raw = features.compute(total, final=True)
    normalize = RunningFeatureNormalization(raw.size(1))
    ends = [1, 2, 49, 105, 161, total]
    start = 0
    for end in ends:
        block = normalize(raw[:, :, start:end])
        expected, _, _ = normalize_batch(raw[:, :, :end], torch.tensor([end]), "per_feature")
        # float64 running sums against NeMo's float32 two-pass mean/std: equal to 1e-4 (4e-5 measured; a
        # block of a few frames has a small std, which magnifies float32 rounding)
        torch.testing.assert_close(block, expected[:, :, start:end], atol=1e-4, rtol=0)
        start = end
    # the last block has the whole utterance's statistics: as the offline preprocessor normalises it
    with torch.inference_mode():
        offline_features, length = per_feature_model.preprocessor(input_signal=torch.from_numpy(audio)[None],
                                                                  length=torch.tensor([len(audio)]))
    torch.testing.assert_close(block, offline_features[:, :, ends[-2]: total], atol=1e-4, rtol=0)


def test_per_feature_streaming_equals_the_offline_encoder_on_the_same_running_features(per_feature_model,
                                                                                       tmp_path):
    """What the model's context allows: with running statistics the features differ from offline decoding's,
    but the cache-aware steps still give exactly what the full-context forward pass gives on them."""
    from duet.asr.streaming import IncrementalFeatures, RunningFeatureNormalization

    audio = speech(tmp_path)
    final = list(stream_transcribe(per_feature_model, audio))[-1]
    # the blocks a session normalises: one per chunk as it completes, the rest at the end
    features = IncrementalFeatures(per_feature_model, keep_normalization=False)
    features.add(audio)
    normalize = RunningFeatureNormalization(80)
    first, later = per_feature_model.encoder.streaming_cfg.chunk_size
    blocks, end = [], first
    while end <= features.frames_ready():
        blocks.append(normalize(features.compute(end)))
        end += later
    blocks.append(normalize(features.compute(features.total_frames(), final=True)))
    running = torch.cat(blocks, -1)
    running = torch.nn.functional.pad(running, (0, 1))  # the preprocessor's one masked frame past the end
    with torch.inference_mode():
        _, lengths, greedy = per_feature_model.forward(processed_signal=running,
                                                       processed_signal_length=torch.tensor([running.size(-1) - 1]))
    assert final.frame_labels == greedy[0, : lengths[0]].tolist()
    # and it is not the offline transcript of whole-utterance statistics (which the old code streamed)
    assert final.frame_labels != offline(per_feature_model, audio)[0]


def test_raw_pcm_is_read_in_pieces_and_an_odd_byte_is_an_error():
    import io

    from duet.asr.streaming import read_pcm16

    samples = np.array([0, 1, -1, 32767, -32768] * 700, dtype="<i2")
    pieces = list(read_pcm16(io.BytesIO(samples.tobytes()), piece_samples=1600))
    assert [len(p) for p in pieces] == [1600, 1600, 300]
    np.testing.assert_array_equal(np.concatenate(pieces), samples / 32768.0)
    with pytest.raises(AsrInputError, match="16-bit"):
        list(read_pcm16(io.BytesIO(samples.tobytes() + b"\x01")))
