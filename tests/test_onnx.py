"""ONNX export and engine (duet.asr.onnx_export, duet.asr.onnx_engine, tools/export_onnx.py, --engine onnx):
the micro model exported once, its transcripts against PyTorch's, greedy and beam (+ LM)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from duet.asr import inference
from duet.asr.decoding import decoding_settings
from duet.asr.inference import transcribe_files
from duet.asr.onnx_engine import GRAPHS, METADATA, TOKENIZER, OnnxCtcModel, OnnxExportError, load_onnx_model
from duet.errors import AsrInputError
from duet.text import normalize_text
from tests.asr_helpers import transcripts_with
from tests.script_helpers import load_script
from tests.test_pipeline import cli, fake_slm, speech_file  # noqa: F401 (fixtures)

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def micro_export(micro_model_and_manifest, tmp_path_factory):
    """The micro model exported with an int8 graph into ``micro_onnx/`` beside a copy of its .nemo (where
    --engine onnx looks); returns (the .nemo copy, the export folder)."""
    from duet.asr.onnx_export import OnnxExportSettings, export_onnx

    _, model_path, _, entries = micro_model_and_manifest
    root = tmp_path_factory.mktemp("onnx")
    nemo = root / "micro.nemo"
    shutil.copy(model_path, nemo)
    folder = root / "micro_onnx"
    export_onnx(nemo, folder, [e["audio_filepath"] for e in entries[:4]], OnnxExportSettings(int8=True))
    return nemo, folder


def paths_of(entries) -> list[str]:
    return [e["audio_filepath"] for e in entries]


def test_onnx_greedy_transcripts_equal_pytorch(micro_model_and_manifest, micro_export):
    model, _, _, entries = micro_model_and_manifest
    _, folder = micro_export
    torch_texts = transcribe_files(model, paths_of(entries), batch_size=3)
    assert any(torch_texts), "random weights should emit some tokens"
    onnx_model = OnnxCtcModel(folder)
    # batches of 3 over 7 files: padding inside batches, and a batch of one; in this thread (one session, its
    # intra-op threads) and in two decoding threads (each running the one-thread session, batches made smaller
    # so that each thread gets several)
    assert transcribe_files(onnx_model, paths_of(entries), batch_size=3, workers=1) == torch_texts
    assert onnx_model._one_thread_session is None, "one batch at a time needs no second session"
    own_session = onnx_model.session
    assert transcribe_files(onnx_model, paths_of(entries), batch_size=3, workers=2) == torch_texts
    assert onnx_model.session is own_session, "the threads run a view of the model, not the model changed"
    one_thread_session = onnx_model._one_thread_session
    assert one_thread_session is not None and one_thread_session is not own_session
    # the next call's threads run the same one-thread session: it is opened once per model, not per call
    assert transcribe_files(onnx_model, paths_of(entries), batch_size=3, workers=2) == torch_texts
    assert onnx_model._one_thread_session is one_thread_session


def test_onnx_threads_run_padded_batches_and_nothing_at_all(micro_model_and_manifest, micro_export, monkeypatch):
    """With one batch per thread allowed, the threads get padded batches of 3 (7 files: 3 + 3 + 1), the sizes
    the torch engine runs; no audio at all is no transcripts, not an error."""
    model, _, _, entries = micro_model_and_manifest
    _, folder = micro_export
    torch_texts = transcribe_files(model, paths_of(entries), batch_size=3)
    onnx_model = OnnxCtcModel(folder)
    monkeypatch.setattr(inference, "BATCHES_PER_THREAD", 1)
    assert transcribe_files(onnx_model, paths_of(entries), batch_size=3, workers=2) == torch_texts
    for workers in (None, 1, 2):
        assert inference.transcribe_audio(onnx_model, [], workers=workers) == []


def test_onnx_threads_decode_in_the_calling_thread_and_raise_a_threads_error(micro_model_and_manifest, micro_export,
                                                                            monkeypatch):
    """The decoding threads only run the graph: decoding (NeMo's objects, maybe an LM) stays in the caller's
    thread; an error in a thread (a file that cannot be read) reaches the caller."""
    import threading

    _, _, _, entries = micro_model_and_manifest
    _, folder = micro_export
    onnx_model = OnnxCtcModel(folder)
    decoding_threads = set()

    class FrameCounter:  # a decoder whose "transcript" is the utterance's frame count
        forkable, reads_audio = True, False

        def texts(self, log_probs, lengths, audios):
            assert audios is None  # only a decoder that rescores with the audio keeps it
            decoding_threads.add(threading.get_ident())
            return [int(n) for n in lengths]

    frames = transcribe_files(onnx_model, paths_of(entries), batch_size=2, workers=2, decoder=FrameCounter())
    assert decoding_threads == {threading.get_ident()}
    assert len(frames) == len(entries) and all(n > 0 for n in frames)
    real_load_audio, broken = inference.load_audio, paths_of(entries)[-1]

    def load_audio(path, sample_rate):  # a file that goes bad between its header and its samples
        if str(path) == broken:
            raise AsrInputError(f"{path}: cannot decode it")
        return real_load_audio(path, sample_rate)

    monkeypatch.setattr(inference, "load_audio", load_audio)
    with pytest.raises(AsrInputError, match="cannot decode"):
        transcribe_files(onnx_model, paths_of(entries), batch_size=2, workers=2)


class AudioLengthRescoring:
    """A stand-in for Whisper's rescoring (duet.asr.decoding.beam.BeamRescoring): each utterance's transcript is its
    audio's length, so a transcript shows which audio reached the decoder beside which log-probabilities."""

    forkable = True

    def best(self, nbest, log_probs, lengths, audios):
        from duet.asr.decoding.rescoring import Candidate

        assert len(audios) == len(log_probs) == len(lengths) == len(nbest)
        return [Candidate(str(len(audio)), 0.0) for audio in audios]


@pytest.mark.parametrize("engine", ["torch", "onnx"])
def test_a_rescoring_decoding_gets_each_utterances_own_audio_on_every_path(micro_model_and_manifest, micro_export,
                                                                          engine):
    """In one process, in forked workers (torch) and in the engine's threads (onnx), the audio handed to a
    rescoring decoder is the utterance's own, whatever order the batches run in."""
    from duet.asr.decoding import BeamSettings, CtcDecoder
    from duet.asr.decoding.beam import beam_config

    model, _, _, entries = micro_model_and_manifest
    model = model if engine == "torch" else OnnxCtcModel(micro_export[1])
    paths = paths_of(entries)
    lengths = [str(len(inference.load_audio(path, 16000))) for path in paths]
    beam = BeamSettings(beam_size=2)
    decoder = CtcDecoder(model, beam, beam_config(model, beam, None, 0.0, n_best=True), AudioLengthRescoring())
    for workers in (1, 2):
        assert transcribe_files(model, paths, batch_size=2, workers=workers, decoder=decoder) == lengths


def test_export_folder_holds_graphs_tokenizer_and_metadata(micro_model_and_manifest, micro_export):
    model, _, _, _ = micro_model_and_manifest
    nemo, folder = micro_export
    assert {p.name for p in folder.iterdir()} == {METADATA, TOKENIZER, GRAPHS["fp32"], GRAPHS["int8"]}
    metadata = json.loads((folder / METADATA).read_text())
    assert metadata["vocabulary"] == list(model.decoder.vocabulary) and metadata["blank_id"] == 40
    assert metadata["sample_rate"] == 16000 and metadata["source_model"] == str(nemo)
    assert metadata["preprocessor"]["features"] == model.cfg.preprocessor.features
    assert metadata["subsampling"]["factor"] == model.encoder.pre_encode.subsampling_factor
    assert metadata["graphs"] == {"fp32": GRAPHS["fp32"], "int8": GRAPHS["int8"]}
    assert metadata["int8"]["method"] == "dynamic"
    assert metadata["matmul_pointwise_layers"] == len(model.encoder.layers)
    parity = metadata["parity"]
    assert len(parity["files"]) == 4 and parity["fp32"]["transcripts_differ"] == 0
    assert parity["fp32"]["max_abs_log_prob_diff"] < 1e-3
    assert not [p for p in folder.parent.iterdir() if p.name.startswith(".")], "staging folder left behind"


def test_int8_graph_loads_and_transcribes(micro_model_and_manifest, micro_export):
    _, _, _, entries = micro_model_and_manifest
    nemo, folder = micro_export
    int8 = load_onnx_model(nemo, int8=True)
    assert int8.precision == "int8"
    texts = transcribe_files(int8, paths_of(entries))
    assert len(texts) == len(entries) and any(texts)


def test_beam_and_beam_lm_on_onnx_log_probs_equal_the_torch_engine(micro_model_and_manifest, micro_token_lm,
                                                                    micro_export):
    model, _, _, entries = micro_model_and_manifest
    onnx_model = OnnxCtcModel(micro_export[1])
    paths = paths_of(entries)
    for settings in (decoding_settings("beam", beam_size=4, beta=1.0),
                     decoding_settings("beam_lm", ngram_lm=str(micro_token_lm), alpha=0.8, beta=1.5)):
        assert transcripts_with(onnx_model, settings, paths) == transcripts_with(model, settings, paths)


def test_missing_export_corrupt_graph_and_missing_model_are_one_line_errors(micro_export, tmp_path):
    nemo, folder = micro_export
    with pytest.raises(OnnxExportError, match="no ONNX export in .*tools/export_onnx.py") as caught:
        load_onnx_model(tmp_path / "other.nemo")
    assert str(tmp_path / "other_onnx") in str(caught.value)
    broken = tmp_path / "broken_onnx"
    shutil.copytree(folder, broken)
    (broken / GRAPHS["fp32"]).write_bytes(b"not a graph")
    with pytest.raises(OnnxExportError, match="ONNX Runtime cannot load it") as caught:
        load_onnx_model(broken)
    assert str(broken / GRAPHS["fp32"]) in str(caught.value) and "\n" not in str(caught.value)
    (broken / METADATA).write_text("{}")
    with pytest.raises(OnnxExportError, match="not a duet-onnx-ctc metadata file"):
        load_onnx_model(broken)


def test_export_cli_errors_name_the_path(tmp_path, capsys):
    export = load_script(REPO / "tools/export_onnx.py", "export_onnx_cli")
    assert export.main([str(tmp_path / "none.nemo")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("export_onnx: error: ") and str(tmp_path / "none.nemo") in err
    assert len(err.strip().splitlines()) == 1


def test_export_refuses_a_folder_that_is_not_an_export(micro_export, tmp_path):
    from duet.asr.onnx_export import export_onnx

    nemo, _ = micro_export
    (tmp_path / "keep.txt").write_text("mine")
    with pytest.raises(OnnxExportError, match="is not an ONNX export folder"):
        export_onnx(nemo, tmp_path, ["unused.flac"])
    assert (tmp_path / "keep.txt").read_text() == "mine"


def test_evaluate_cli_engine_onnx_scores_like_torch(micro_model_and_manifest, micro_export, tmp_path, capsys):
    evaluate_ctc = load_script(REPO / "nemo_recipes/evaluate_ctc.py", "evaluate_ctc_cli")
    model, _, manifest, entries = micro_model_and_manifest
    nemo, _ = micro_export
    out = tmp_path / "out"
    code = evaluate_ctc.main(["--model", str(nemo), "--engine", "onnx", "--manifest", str(manifest),
                              "--out-dir", str(out)])
    assert code == 0, capsys.readouterr().err[-3000:]
    summary = json.loads((out / "eval_summary.json").read_text())
    assert summary["engine"] == "onnx" and summary["int8"] is False
    hyps = [json.loads(line)["hyp"] for line in (out / "eval_utterances.jsonl").read_text().splitlines()]
    assert hyps == [normalize_text(t) for t in transcribe_files(model, paths_of(entries))]
    assert evaluate_ctc.main(["--model", str(nemo), "--engine", "onnx", "--manifest", str(manifest),
                              "--stream"]) == 2
    assert "--stream is not used with --engine onnx" in capsys.readouterr().err


def test_pipeline_engine_onnx_answers_with_the_onnx_transcript(cli, fake_slm, micro_model_and_manifest,  # noqa: F811
                                                               micro_export, speech_file, capfd):
    model, _, _, _ = micro_model_and_manifest
    nemo, _ = micro_export
    # --min-confidence 0: the random model's transcript is answered whatever its confidence
    code = cli.main([speech_file, "--asr-model", str(nemo), *fake_slm, "--engine", "onnx", "--int8", "--json",
                     "--min-confidence", "0"])
    assert code == 0
    result = json.loads(capfd.readouterr().out.strip().splitlines()[-1])
    int8_text = transcribe_files(load_onnx_model(nemo, int8=True), [speech_file])[0].strip()
    assert int8_text, "random weights should emit some tokens"
    assert result["transcript"] == int8_text and result["response"] == f"ok: {int8_text}"
    assert cli.main([speech_file, "--asr-model", str(nemo), *fake_slm, "--int8"]) == 2  # before anything loads
    assert "--int8 needs --engine onnx" in capfd.readouterr().err


@pytest.mark.parametrize("subsampling, factor, activation", [("dw_striding", 8, "ReLU"), ("striding", 4, "ReLU"),
                                                              ("dw_striding", 4, "SiLU")])
def test_lean_subsampling_masks_leave_every_valid_frame_equal(subsampling, factor, activation):
    import torch
    from nemo.collections.asr.parts.submodules.subsampling import ConvSubsampling

    from duet.asr.onnx_export import LeanMaskedConvSequential, use_lean_subsampling_masks

    torch.manual_seed(0)
    pre_encode = ConvSubsampling(subsampling=subsampling, subsampling_factor=factor, feat_in=16, feat_out=24,
                                 conv_channels=8, activation=getattr(torch.nn, activation)()).eval()
    lengths = torch.tensor([77, 64, 31, 9])  # odd and even: each stride leaves a different boundary
    x = torch.randn(4, 77, 16)  # [B, T, F], as the encoder hands it over; the padding holds noise, not zeros
    with torch.no_grad():
        nemo_out, nemo_lengths = pre_encode(x, lengths)
        model = type("Model", (), {"encoder": type("Encoder", (), {"pre_encode": pre_encode})()})()
        assert use_lean_subsampling_masks(model) and isinstance(pre_encode.conv, LeanMaskedConvSequential)
        # the first convolution's mask becomes a gate channel only where a ReLU follows it
        assert pre_encode.conv.gate_first == (activation == "ReLU")
        lean_out, lean_lengths = pre_encode(x, lengths)
    assert torch.equal(lean_lengths, nemo_lengths)
    for row, n in enumerate(nemo_lengths.tolist()):
        assert torch.equal(lean_out[row, :n], nemo_out[row, :n]), f"utterance {row} differs"
    # the equality means something: with no masks at all, the noise in the padding reaches valid frames
    with torch.no_grad():
        unmasked = torch.nn.Sequential(*pre_encode.conv)(x.unsqueeze(1))
        b, c, t, f = unmasked.shape
        unmasked = pre_encode.out(unmasked.transpose(1, 2).reshape(b, t, -1))
    assert any(not torch.equal(unmasked[row, :n], nemo_out[row, :n]) for row, n in enumerate(nemo_lengths.tolist()))


@pytest.mark.parametrize("norm_type", ["batch_norm", "layer_norm"])
def test_matmul_pointwise_convolutions_compute_nemos_convolution_module(norm_type):
    import torch
    from nemo.collections.asr.parts.submodules.conformer_modules import ConformerLayer

    from duet.asr.onnx_export import MatMulPointwiseConvolution, use_matmul_pointwise_convolutions

    torch.manual_seed(0)
    layers = torch.nn.ModuleList([ConformerLayer(d_model=16, d_ff=32, n_heads=2, conv_kernel_size=5,
                                                 conv_norm_type=norm_type) for _ in range(2)])
    for layer in layers:  # statistics that are not the identity, so the norm's place in the chain matters
        for name, buffer in layer.conv.batch_norm.named_buffers():
            if name in ("running_mean", "running_var"):
                buffer.copy_(torch.rand_like(buffer) + 0.5)
    layers.eval()
    x = torch.randn(3, 11, 16)
    pad_mask = torch.arange(11)[None, :] >= torch.tensor([11, 7, 2])[:, None]
    with torch.no_grad():
        nemo_out = [layer.conv(x, pad_mask=pad_mask) for layer in layers]
        model = type("Model", (), {"encoder": type("Encoder", (), {"layers": layers})()})()
        assert use_matmul_pointwise_convolutions(model) == 2
        assert all(isinstance(layer.conv, MatMulPointwiseConvolution) for layer in layers)
        ours = [layer.conv(x, pad_mask=pad_mask) for layer in layers]
    for a, b in zip(ours, nemo_out):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    # a second call finds nothing left to wrap
    assert use_matmul_pointwise_convolutions(model) == 0


def test_a_whisper_encoder_export_reads_input_past_its_positions_in_the_encoders_windows(micro_model_and_manifest,
                                                                                         tmp_path):
    """The graph reads one window of learned positions (the trace has no loop): the engine windows longer input as
    the encoder does in PyTorch, so a recording past 30 s gets the same log-probs on both engines."""
    import numpy as np
    import torch

    from duet.asr.onnx_export import OnnxExportSettings, export_onnx
    from duet.asr.whisper_encoder import window_spans
    from tests.asr_helpers import build_ctc_model

    _, micro_path, _, entries = micro_model_and_manifest
    tokenizer_dir = tmp_path / "tok"
    shutil.copytree(Path(micro_path).parent / "tok", tokenizer_dir)
    # Whisper's encoder made micro: 50 positions are 1 s of audio where Whisper's 1500 are 30 s
    model = build_ctc_model("whisper_tiny_ctc", tokenizer_dir, ["model.encoder.n_layers=1", "model.encoder.d_model=8",
                                                                "+model.encoder.n_heads=2", "+model.encoder.ff_dim=16",
                                                                "+model.encoder.max_positions=50"])
    model.encoder.positions.normal_()  # the positions read differently in each window
    model.save_to(str(tmp_path / "w.nemo"))
    export_onnx(tmp_path / "w.nemo", tmp_path / "w_onnx", paths_of(entries[:2]), OnnxExportSettings())
    onnx = OnnxCtcModel(tmp_path / "w_onnx")
    assert json.loads((tmp_path / "w_onnx" / METADATA).read_text())["subsampling"]["max_positions"] == 50
    audio = np.concatenate([inference.load_audio(path, 16000) for path in paths_of(entries[:3])])[: 16000 * 4]
    audios = [audio, audio[: 16000 * 2], audio[:8000]]  # 4 s (200 frames: 5 windows), 2 s and one window
    assert len(window_spans(200, 50)) == 5
    log_probs, lengths = onnx.log_probs(audios)
    with torch.inference_mode():
        signal, signal_lengths = inference.pad_batch(audios)
        expected, expected_lengths, _ = model.forward(input_signal=signal, input_signal_length=signal_lengths)
    assert log_probs.shape == expected.shape and lengths.tolist() == expected_lengths.tolist() == [200, 100, 25]
    for row, n in enumerate(lengths.tolist()):
        # the same but at a window's first and last frames, whose convolution reads zeros past the window's features
        # where PyTorch's reads the neighbouring features; those frames' own outputs are not kept
        assert torch.allclose(log_probs[row, :n], expected[row, :n], atol=1e-2)
        assert torch.equal(log_probs[row, :n].argmax(-1), expected[row, :n].argmax(-1))


def test_the_benches_int8_export_is_made_once_beside_the_model(micro_model_and_manifest, tmp_path):
    from duet.asr.onnx_export import int8_export_beside

    _, model_path, _, _ = micro_model_and_manifest
    nemo = tmp_path / "m.nemo"
    shutil.copy(model_path, nemo)
    said = []
    folder = int8_export_beside(nemo, said.append)
    assert folder == tmp_path / "m_onnx" and (folder / GRAPHS["int8"]).is_file()
    assert said == [f"exporting {nemo} to {folder} (once)"]
    assert int8_export_beside(nemo, said.append) == folder and len(said) == 1  # there already: not made again
