"""Transcribe with a CTC model exported to ONNX (``duet.asr.onnx_export``): ONNX Runtime runs the encoder and
the CTC head, the model's own NeMo code does the rest.

An export folder holds the graph (``model.onnx``, and ``model.int8.onnx`` when quantised), the tokenizer and
``metadata.json``: the feature front end's config (NeMo's ``AudioToMelSpectrogramPreprocessor``, run in torch
outside the graph: the STFT is a small part of the time and keeps the features bit-identical), the encoder's
subsampling (the graph returns log-probs only; the encoded lengths come from NeMo's ``calc_length``), the
vocabulary and the model's decoding config. :class:`OnnxCtcModel` carries what ``duet.asr.decoding`` and
``duet.asr.inference.transcribe_files`` use of a NeMo model (``cfg``, ``tokenizer``, ``decoding``), so every
decoder decodes the ONNX log-probs through NeMo's ``CTCBPEDecoding``, the same code path as the torch engine.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Sequence

import numpy as np
import onnxruntime as ort
import torch
from omegaconf import OmegaConf, open_dict

import duet.nemo_targets
from duet.asr.inference import pad_batch
from duet.errors import AsrInputError
from duet.foundation import python_command
from duet.foundation.errors import first_line

ENGINES = ("torch", "onnx")
METADATA = "metadata.json"
TOKENIZER = "tokenizer.model"
GRAPHS = {"fp32": "model.onnx", "int8": "model.int8.onnx"}
FORMAT = "duet-onnx-ctc"  # metadata.json's "format": a folder of ours, not any ONNX file
EXPORT_SCRIPT = "tools/export_onnx.py"


class OnnxExportError(AsrInputError):
    """A missing, incomplete or corrupt export folder: one line naming the path (and the command that writes it)."""


def default_export_dir(nemo_path: str | Path) -> Path:
    """Where ``tools/export_onnx.py`` writes by default and ``--engine onnx`` looks: ``<stem>_onnx/`` beside the .nemo."""
    nemo_path = Path(nemo_path)
    return nemo_path.with_name(f"{nemo_path.stem}_onnx")


def resolve_export_dir(model_path: str | Path) -> Path:
    """The export folder for ``--model``: the path itself when it is a folder, else ``<stem>_onnx/`` beside the .nemo.

    A folder without ``metadata.json`` is an :class:`OnnxExportError` naming it and the export command.
    """
    model_path = Path(model_path)
    folder = model_path if model_path.is_dir() else default_export_dir(model_path)
    if not (folder / METADATA).is_file():
        source = model_path if model_path.suffix == ".nemo" else "MODEL.nemo"
        raise OnnxExportError(f"no ONNX export in {folder} (no {METADATA}): run "
                              f"{python_command(EXPORT_SCRIPT, str(source), str(folder))}")
    return folder


def read_metadata(folder: str | Path) -> dict:
    """``metadata.json`` of an export folder, checked to be ours."""
    path = Path(folder) / METADATA
    try:
        metadata = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise OnnxExportError(f"cannot read {path}: {first_line(e)}") from None
    if not isinstance(metadata, dict) or metadata.get("format") != FORMAT:
        raise OnnxExportError(f"{path} is not a {FORMAT} metadata file (written by {python_command(EXPORT_SCRIPT)})")
    return metadata


def session_threads() -> int:
    """ONNX Runtime's intra-op threads: torch's thread count (the physical cores unless OMP_NUM_THREADS or
    ``torch.set_num_threads`` said otherwise), the same budget the torch engine spends."""
    return max(1, torch.get_num_threads())


def inference_session(graph: Path, threads: int | None = None):
    """An ONNX Runtime CPU session on ``graph`` with every graph optimisation and ``threads`` intra-op threads."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads or session_threads()
    options.inter_op_num_threads = 1  # the graph is one chain of layers: nothing runs side by side
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    # idle pool threads sleep instead of spinning: on the shared 2-core machine spinning cost 40 % more CPU
    # seconds at the same wall time (fastconformer_small fp32: RTFx per CPU s 37 -> 52, RESULTS.md)
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    try:
        return ort.InferenceSession(str(graph), sess_options=options, providers=["CPUExecutionProvider"])
    except Exception as e:  # onnxruntime raises its own Fail/InvalidProtobuf/... types, no common base but Exception
        raise OnnxExportError(f"{graph}: ONNX Runtime cannot load it ({first_line(e)})") from None


class OnnxCtcModel:
    """A CTC model exported by ``duet.asr.onnx_export``, as ``duet.asr.inference`` and ``duet.asr.decoding`` use it.

    ``int8`` picks ``model.int8.onnx`` (exported with ``--int8``). Its own ``decoding`` is the model's saved config
    (greedy); a decoder of ``duet.asr.decoding`` decodes its log-probs as it does a NeMo model's.
    """

    def __init__(self, folder: str | Path, int8: bool = False, threads: int | None = None):
        # NeMo's preprocessor, tokenizer and CTC decoding (~20 s to import): only loading a model pays for it
        from nemo.collections.asr.modules import AudioToMelSpectrogramPreprocessor
        from nemo.collections.common.tokenizers import SentencePieceTokenizer

        duet.nemo_targets.install()  # a Whisper front end's _target_ is duet's

        self.folder = Path(folder)
        self.metadata = read_metadata(self.folder)
        self.precision = "int8" if int8 else "fp32"
        graph = self.folder / self.metadata["graphs"].get(self.precision, GRAPHS[self.precision])
        if not graph.is_file():
            hint = f"{python_command(EXPORT_SCRIPT)} {self.metadata.get('source_model', 'MODEL.nemo')} {self.folder}"
            raise OnnxExportError(f"{graph} not found: run {hint}{' --int8' if int8 else ''}")
        tokenizer_path = self.folder / TOKENIZER
        if not tokenizer_path.is_file():
            raise OnnxExportError(f"{tokenizer_path} not found: the export folder is incomplete, export it again")
        self.graph = graph
        self.session = inference_session(graph, threads)
        self._one_thread_session = None  # see one_thread
        self.input_names = [i.name for i in self.session.get_inputs()]
        self.output_name = self.session.get_outputs()[0].name
        self.tokenizer = SentencePieceTokenizer(model_path=str(tokenizer_path))
        # NeMo's ASR models set these on the SentencePiece processor when they load a BPE tokenizer
        # (ASRBPEMixin._setup_tokenizer, which needs a model around it); CTCBPEDecoding reads the blank id there
        self.tokenizer.tokenizer.vocab_size = self.tokenizer.vocab_size
        self.tokenizer.tokenizer.all_special_tokens = self.tokenizer.special_token_to_id
        self.cfg = OmegaConf.create({"sample_rate": self.metadata["sample_rate"],
                                     "preprocessor": self.metadata["preprocessor"],
                                     "decoding": self.metadata["decoding"]})
        self.preprocessor = AudioToMelSpectrogramPreprocessor.from_config_dict(self.cfg.preprocessor).eval()
        # what duet.asr.words reads of a NeMo encoder to turn frames into seconds
        self.encoder = SimpleNamespace(subsampling_factor=self.metadata["subsampling"]["factor"])
        self.decoding = None
        self.change_decoding_strategy(self.cfg.decoding, verbose=False)

    def one_thread(self) -> "OnnxCtcModel":
        """This model running a one-thread session (opened on first use, then kept): what each of several
        decoding threads runs (``duet.asr.inference``), side by side in one process.

        A one-thread session runs on the calling thread and releases the GIL while it does, so two threads each
        decoding whole batches keep two cores busy without synchronising inside every operator: 140 files in
        1.07 s against 1.37 s for one session splitting each operator over two intra-op threads (RESULTS.md).
        Everything but the session is shared with this model.
        """
        if self._one_thread_session is None:
            self._one_thread_session = inference_session(self.graph, 1)
        view = copy.copy(self)
        view.session = self._one_thread_session
        return view

    def change_decoding_strategy(self, decoding_cfg, verbose: bool = True) -> None:
        """NeMo's CTC decoding (greedy_batch, beam_batch with an n-gram LM, ...) built from ``decoding_cfg``, as
        ``EncDecCTCModelBPE.change_decoding_strategy`` builds it; the config is kept in ``cfg.decoding``."""
        # NeMo (~20 s to import) is loaded by __init__ already; deferred with it
        from nemo.collections.asr.parts.submodules.ctc_decoding import CTCBPEDecoding

        self.decoding = CTCBPEDecoding(decoding_cfg=decoding_cfg, tokenizer=self.tokenizer)
        with open_dict(self.cfg):
            self.cfg.decoding = decoding_cfg

    def features(self, audios: Sequence[np.ndarray]):
        """Zero-padded batch of ``audios`` through the model's preprocessor: (features [B, F, T], lengths [B])."""
        signal, lengths = pad_batch(audios)
        with torch.inference_mode():
            return self.preprocessor(input_signal=signal, length=lengths)

    def encoded_lengths(self, feature_lengths):
        """Frames of the log-probs per utterance: NeMo's own subsampling arithmetic on the feature lengths."""
        # NeMo (~20 s to import) is loaded by __init__ already; deferred with it
        from nemo.collections.asr.parts.submodules.subsampling import calc_length

        s = self.metadata["subsampling"]
        if s.get("type") == "whisper":
            return torch.div(feature_lengths + 1, 2, rounding_mode="floor").long()
        return calc_length(feature_lengths, all_paddings=s["all_paddings"], kernel_size=s["kernel_size"],
                           stride=s["stride"], ceil_mode=s["ceil_mode"], repeat_num=s["repeat_num"]).long()

    def run_graph(self, features, feature_lengths) -> np.ndarray:
        """The ONNX graph on a feature batch: log-probs [B, T', vocabulary + blank]. A Whisper encoder's graph reads
        one window of its learned positions (30 s): longer input is read in the encoder's own overlapping windows
        (``duet.asr.whisper_encoder.window_spans``), the graph once per window. (The encoder's adapter blocks, which
        the bundled base has one of, read the whole input in PyTorch and each window's here: past 30 s the log-probs
        differ a little from PyTorch's; RESULTS.md, "Recordings past Whisper's 30 s".)"""
        subsampling = self.metadata["subsampling"]
        if subsampling.get("type") != "whisper":
            return self._run_session(features, feature_lengths)
        # NeMo's modules: loaded by __init__ already
        from duet.asr.whisper_encoder import MAX_POSITIONS, window_spans

        frames = (features.shape[-1] + 1) // 2  # the encoder's stride-2 convolution's output
        # an export made before the metadata held the positions has Whisper's own
        spans = window_spans(frames, int(subsampling.get("max_positions", MAX_POSITIONS)))
        if len(spans) <= 1:  # within one window (or no frame at all): the graph as it is
            return self._run_session(features, feature_lengths)
        pieces = []
        for start, end, first, last in spans:
            # as the encoder reads a window: its features alone, and an utterance that ended before it one frame
            lengths = (feature_lengths - 2 * start).clamp(min=1, max=2 * (end - start))
            pieces.append(self._run_session(features[..., 2 * start : 2 * end].contiguous(), lengths)[:, first:last])
        return np.concatenate(pieces, axis=1)

    def _run_session(self, features, feature_lengths) -> np.ndarray:
        feeds = dict(zip(self.input_names, (features.numpy(), feature_lengths.numpy().astype(np.int64))))
        return self.session.run([self.output_name], feeds)[0]

    def log_probs(self, audios: Sequence[np.ndarray]):
        """CTC log-probs (torch, [B, T', V]) and their lengths for mono float32 ``audios`` at ``cfg.sample_rate``
        (:meth:`run_graph`)."""
        features, feature_lengths = self.features(audios)
        return torch.from_numpy(self.run_graph(features, feature_lengths)), self.encoded_lengths(feature_lengths)


def load_onnx_model(model_path: str | Path, int8: bool = False, threads: int | None = None) -> OnnxCtcModel:
    """The export of ``model_path`` (an export folder, or a .nemo whose ``<stem>_onnx/`` folder holds it)."""
    return OnnxCtcModel(resolve_export_dir(model_path), int8=int8, threads=threads)
