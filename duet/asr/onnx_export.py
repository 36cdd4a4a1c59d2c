"""Export a NeMo CTC ``.nemo`` to an ONNX folder that ``duet.asr.onnx_engine.OnnxCtcModel`` runs.

What goes in the folder (written under a temporary name and renamed into place, so a failed export leaves
nothing behind, and an earlier export stays until the new one is complete):

- ``model.onnx``: encoder + CTC head by NeMo's own exporter (``model.export``, the TorchScript-based
  ``torch.onnx.export``, opset 17), inputs ``audio_signal`` [B, features, T] and ``length`` [B], dynamic
  batch and time; output ``logprobs`` [B, T', vocabulary + blank].
- ``model.int8.onnx`` (``int8``): ONNX Runtime's quantisation of it (``Int8Method``; dynamic by default,
  see RESULTS.md for the measured choice).
- ``tokenizer.model``: the SentencePiece model, for NeMo's ``CTCBPEDecoding``.
- ``metadata.json``: the preprocessor config (features are computed outside the graph), the subsampling
  arithmetic of the encoder, the vocabulary, the decoding config, and the parity check.

The parity check: greedy transcripts of a few files through PyTorch (``duet.asr.inference``) and through the
exported graph, in one padded batch; an fp32 graph that disagrees is an error, int8 differences are counted
into the metadata and the report.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from omegaconf import OmegaConf
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_dynamic, quantize_static
from onnxruntime.quantization.shape_inference import quant_pre_process

from duet.asr.inference import load_asr_model, load_audio, pad_batch, transcribe_audio
from duet.asr.onnx_engine import (FORMAT, GRAPHS, METADATA, TOKENIZER, OnnxCtcModel, OnnxExportError,
                                  default_export_dir)
from duet.foundation import SAMPLES_DIR
from duet.foundation.errors import first_line
from duet.foundation.files import write_text_atomic

INT8_METHODS = ("dynamic", "static")
OPSET = 17


@dataclass(frozen=True)
class OnnxExportSettings:
    """How to export. ``int8_method``: ``dynamic`` (weights int8, activations quantised per batch at run time)
    or ``static`` (activation ranges calibrated on the check files, QDQ format)."""

    int8: bool = False
    int8_method: str = "dynamic"
    # the operators quantised: the encoder's matrix products (attention, feed-forward, the CTC head); ORT's
    # integer convolutions were slower than fp32 ones on this CPU (RESULTS.md)
    int8_ops: tuple[str, ...] = ("MatMul",)

    def validate(self) -> None:
        if self.int8_method not in INT8_METHODS:
            raise OnnxExportError(f"unknown int8 method {self.int8_method!r}; choose from {INT8_METHODS}")


@dataclass
class ExportReport:
    folder: Path
    graphs: dict[str, str]
    parity: dict = field(default_factory=dict)  # files, transcripts differing per graph, max log-prob difference


def check_exportable(model, nemo_path: Path) -> dict:
    """The subsampling arithmetic of ``model``'s encoder (for the encoded lengths outside the graph).

    Only what ``OnnxCtcModel`` can rebuild is exported: a SentencePiece (BPE) CTC model whose encoder
    subsamples with NeMo's ``ConvSubsampling`` and no further time reduction; anything else is an error naming
    the file.
    """
    from nemo.collections.common.tokenizers import SentencePieceTokenizer  # deferred with NeMo itself

    if not isinstance(getattr(model, "tokenizer", None), SentencePieceTokenizer):
        raise OnnxExportError(f"{nemo_path}: only SentencePiece (BPE) CTC models are exported")
    if type(model.encoder).__name__ == "WhisperEncoder":  # its one stride-2 convolution: ceil(T / 2) frames
        # max_positions: the ONNX engine windows longer input as the encoder does (its graph reads one window)
        return {"type": "whisper", "factor": int(model.encoder.subsampling_factor),
                "max_positions": int(model.encoder.max_positions)}
    pre_encode = getattr(model.encoder, "pre_encode", None)
    keys = ("_left_padding", "_right_padding", "_kernel_size", "_stride", "_ceil_mode", "_sampling_num")
    if not all(hasattr(pre_encode, k) for k in keys) or getattr(model.encoder, "reduction_subsampling", None):
        raise OnnxExportError(f"{nemo_path}: the encoder's subsampling ({type(pre_encode).__name__}) is not "
                              "NeMo's ConvSubsampling without time reduction; its lengths cannot be rebuilt")
    return {"type": "conv", "all_paddings": pre_encode._left_padding + pre_encode._right_padding,
            "kernel_size": pre_encode._kernel_size, "stride": pre_encode._stride,
            "ceil_mode": bool(pre_encode._ceil_mode), "repeat_num": pre_encode._sampling_num,
            "factor": int(pre_encode.subsampling_factor)}


# Added to a pre-activation, it takes any value the first convolution can give below zero (the ReLU's output
# is then exactly 0); finite, so that the gate channel's zero weights give 0, not NaN
GATE = -1.0e30


class LeanMaskedConvSequential(torch.nn.Sequential):
    """NeMo's ``MaskedConvSequential`` (the 2-D subsampling convolutions, the padded frames zeroed before each
    layer) with only the masks a valid frame depends on: before each convolution whose kernel spans more than one
    time step, and at the end.

    NeMo also masks before the activations and the 1x1 (pointwise) convolutions, and expands each mask over the
    channels. Those layers act on each frame alone, so their masks change only padded frames, which the next
    kept mask zeroes again; the time mask broadcasts over channels and features instead of being materialised,
    and is shaped on the tensor it multiplies.

    The mask after the first convolution (one input channel, then a ReLU, then a convolution across time) is not
    a multiplication but a second input channel of that convolution (:meth:`_gated_first_conv`): a gate, 0 where
    the output frame is valid and ``GATE`` where it is padding, read by the kernel's centre tap alone; the ReLU
    turns the gated frames into exact zeros. That convolution's output is the largest tensor of the encoder
    (e.g. 256 channels at half the frame rate); multiplying it by a mask made ONNX Runtime reorder all of it out
    of its blocked layout and back (RESULTS.md). Every valid output is the same (the export's parity check
    compares the graph with NeMo's forward).
    """

    def __init__(self, *layers):
        super().__init__(*layers)
        first = layers[0] if layers else None
        self.gate_first = (type(first) is torch.nn.Conv2d and first.in_channels == 1 and first.groups == 1
                           and len(layers) > 2 and isinstance(layers[1], torch.nn.ReLU) and _mixes_time(layers[2])
                           and all(k % 2 == 1 for k in first.kernel_size)
                           and tuple(first.padding) == tuple(k // 2 for k in first.kernel_size))

    def forward(self, x, lengths):
        # NeMo (~20 s to import) is loaded with the model already
        from nemo.collections.asr.parts.submodules.subsampling import calculate_conv_output_size

        x = x.unsqueeze(1)  # [B, 1, T, F], as NeMo's
        current = lengths.clone().float()
        for index, layer in enumerate(self):
            before = current
            if getattr(layer, "stride", (1, 1)) != (1, 1):
                # NeMo's own length arithmetic (a causal convolution keeps its padding apart)
                padding = ((layer._left_padding, layer._right_padding) if hasattr(layer, "_left_padding")
                           else layer.padding)
                current = calculate_conv_output_size(current, layer.kernel_size[0], layer.stride[0], padding)
            if _mixes_time(layer) and not (self.gate_first and index == 2):
                # shaped on the tensor it multiplies: shaped on a convolution's output, it would give that output
                # a second consumer, and ONNX Runtime reorders the whole output to read its shape
                x = x * _time_mask(x, before.long())
            x = self._gated_first_conv(x, current.long()) if self.gate_first and index == 0 else layer(x)
        return x * _time_mask(x, current.long()), current.long()

    def _gated_first_conv(self, x, out_lengths):
        """The first convolution with the gate channel (see the class docstring): its output frames at or past
        ``out_lengths`` come out below any value the ReLU lets through."""
        conv = self[0]
        time_kernel, time_stride = conv.kernel_size[0], conv.stride[0]
        # output frame t's kernel centre reads input frame t * stride (symmetric padding k // 2), never padding
        first_gated_input = out_lengths * time_stride
        gated = torch.arange(x.shape[2], device=x.device)[None, :] >= first_gated_input[:, None]
        gate = (gated.to(x.dtype) * GATE)[:, None, :, None].expand(-1, 1, -1, x.shape[3])
        centre_tap = torch.zeros_like(conv.weight[:, :1])
        centre_tap[:, :, time_kernel // 2, conv.kernel_size[1] // 2] = 1.0
        return torch.nn.functional.conv2d(torch.cat([x, gate], dim=1), torch.cat([conv.weight, centre_tap], dim=1),
                                          conv.bias, (time_stride, conv.stride[1]), conv.padding)


def _mixes_time(layer) -> bool:
    """A convolution whose kernel spans more than one time step: it reads neighbouring (maybe padded) frames."""
    return isinstance(layer, torch.nn.Conv2d) and layer.kernel_size[0] > 1


def _time_mask(x, lengths):
    """[B, 1, T, 1]: 1.0 on the valid time steps of ``x`` [B, C, T, F], 0.0 on the padding."""
    valid = torch.arange(x.shape[2], device=x.device)[None, :] < lengths[:, None]
    return valid[:, None, :, None].to(x.dtype)


def use_lean_subsampling_masks(model) -> bool:
    """Swap the encoder's ``MaskedConvSequential`` for :class:`LeanMaskedConvSequential` (same layers, shared);
    False where the encoder has none (1-D subsampling, other encoders): it is left as it is."""
    # NeMo (~20 s to import) is loaded with the model already; importing this module must not pay for it
    from nemo.collections.asr.parts.submodules.subsampling import MaskedConvSequential

    pre_encode = getattr(model.encoder, "pre_encode", None)
    conv = getattr(pre_encode, "conv", None)
    if not isinstance(conv, MaskedConvSequential) or not getattr(pre_encode, "conv2d_subsampling", False):
        return False
    pre_encode.conv = LeanMaskedConvSequential(*conv)
    return True


class MatMulPointwiseConvolution(torch.nn.Module):
    """NeMo's ``ConformerConvolution`` (the convolution module of a Conformer layer, wrapped, its weights shared)
    with its two pointwise (kernel 1) convolutions computed as matrix products over the channels of the [B, T, C]
    tensor around them, the transposes moved inward to the depthwise convolution.

    The same arithmetic; but ONNX Runtime's dynamic int8 quantisation takes matrix products, not convolutions
    (its integer convolutions were slower than fp32 ones here, RESULTS.md), so the two largest products of each
    Conformer convolution module become int8 too: a one-thread session ran fastconformer_small's int8 graph
    4-8 % faster (RESULTS.md). With a cache (streaming) it runs NeMo's module as it is.
    """

    def __init__(self, conv):
        super().__init__()
        self.conv = conv

    def forward(self, x, pad_mask=None, cache=None):
        conv = self.conv
        if cache is not None:
            return conv(x, pad_mask=pad_mask, cache=cache)
        x = torch.nn.functional.linear(x, conv.pointwise_conv1.weight.squeeze(-1), conv.pointwise_conv1.bias)
        if conv.pointwise_activation == "glu_":
            x = torch.nn.functional.glu(x, dim=-1)
        else:
            x = conv.pointwise_activation(x)
        if pad_mask is not None:
            x = x.masked_fill(pad_mask.unsqueeze(-1), 0.0)
        if conv.norm_type == "layer_norm":
            x = conv.batch_norm(conv.depthwise_conv(x.transpose(1, 2)).transpose(1, 2))
        else:
            x = conv.batch_norm(conv.depthwise_conv(x.transpose(1, 2))).transpose(1, 2)
        x = conv.activation(x)
        return torch.nn.functional.linear(x, conv.pointwise_conv2.weight.squeeze(-1), conv.pointwise_conv2.bias)


def _is_pointwise(conv) -> bool:
    return (isinstance(conv, torch.nn.Conv1d) and conv.kernel_size == (1,) and conv.stride == (1,)
            and conv.groups == 1 and conv.padding in ((0,), "valid"))


def use_matmul_pointwise_convolutions(model) -> int:
    """Wrap the convolution module of each Conformer layer of ``model``'s encoder in
    :class:`MatMulPointwiseConvolution`; the number of layers changed (0 where none has NeMo's module)."""
    # NeMo (~20 s to import) is loaded with the model already; importing this module must not pay for it
    from nemo.collections.asr.parts.submodules.conformer_modules import ConformerConvolution

    changed = 0
    for layer in getattr(model.encoder, "layers", []):
        conv = getattr(layer, "conv", None)
        if (type(conv) is ConformerConvolution and _is_pointwise(conv.pointwise_conv1)
                and _is_pointwise(conv.pointwise_conv2)):
            layer.conv = MatMulPointwiseConvolution(conv)
            changed += 1
    return changed


def quantize_int8(fp32_graph: Path, int8_graph: Path, settings: OnnxExportSettings,
                  calibration: Sequence[dict[str, np.ndarray]] = ()) -> None:
    """ONNX Runtime's int8 quantisation of ``fp32_graph`` into ``int8_graph`` (``settings.int8_method``).

    ``static`` calibrates activation ranges (min/max) on ``calibration``: graph feeds, one dict per batch.
    """
    prepared = int8_graph.with_name(int8_graph.stem + ".prep.onnx")
    # ORT's recommended first step (graph optimisation and ONNX shape inference, so more nodes quantise); its
    # symbolic shape inference gives up on NeMo's graph ("Incomplete symbolic shape inference"), hence skipped
    quant_pre_process(str(fp32_graph), str(prepared), skip_symbolic_shape=True)
    try:
        if settings.int8_method == "dynamic":
            quantize_dynamic(str(prepared), str(int8_graph), op_types_to_quantize=list(settings.int8_ops),
                             weight_type=QuantType.QInt8)
            return

        class Feeds(CalibrationDataReader):
            def __init__(self):
                self.feeds = iter(calibration)

            def get_next(self):
                return next(self.feeds, None)

        # QUInt8 activations, QInt8 weights: ORT's advice for x86 CPUs
        quantize_static(str(prepared), str(int8_graph), Feeds(), quant_format=QuantFormat.QDQ,
                        op_types_to_quantize=list(settings.int8_ops), activation_type=QuantType.QUInt8,
                        weight_type=QuantType.QInt8)
    finally:
        prepared.unlink(missing_ok=True)


def export_onnx(nemo_path: str | Path, out_dir: str | Path, check_audio: Sequence[str | Path],
                settings: OnnxExportSettings = OnnxExportSettings()) -> ExportReport:
    """Export ``nemo_path`` into ``out_dir`` (see the module docstring); ``check_audio``: the parity-check files
    (also the calibration data of ``static`` int8)."""
    settings.validate()
    nemo_path, out_dir = Path(nemo_path), Path(out_dir)
    if out_dir.exists() and not (out_dir / METADATA).is_file() and any(out_dir.iterdir()):
        raise OnnxExportError(f"{out_dir} exists and is not an ONNX export folder: give another OUT_DIR")
    if not check_audio:
        raise OnnxExportError("the parity check needs at least one audio file")
    model = load_asr_model(nemo_path, device="cpu")
    subsampling = check_exportable(model, nemo_path)
    sample_rate = int(model.cfg.sample_rate)
    audios = [load_audio(path, sample_rate) for path in check_audio]
    # before the export: NeMo's export preparation changes modules in place
    torch_texts = transcribe_audio(model, audios, batch_size=len(audios), workers=1)
    torch_log_probs = _torch_log_probs(model, audios)

    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", suffix=".tmp", dir=out_dir.parent))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(staging, 0o777 & ~umask)  # mkdtemp makes 0700; the folder gets what an ordinary mkdir would
    try:
        graphs = {"fp32": GRAPHS["fp32"]}
        lean_masks = use_lean_subsampling_masks(model)
        matmul_pointwise = use_matmul_pointwise_convolutions(model)
        try:
            model.export(str(staging / GRAPHS["fp32"]), onnx_opset_version=OPSET)
        except Exception as e:  # torch.onnx raises many types (TorchExportError, RuntimeError, ...); say which
            raise OnnxExportError(f"{nemo_path}: NeMo's ONNX export failed ({first_line(e)})") from e
        (staging / TOKENIZER).write_bytes(model.tokenizer.tokenizer.serialized_model_proto())
        metadata = {
            "format": FORMAT,
            "source_model": str(nemo_path),
            "sample_rate": sample_rate,
            "preprocessor": _plain(model.cfg.preprocessor),
            "subsampling": subsampling,
            "vocabulary": list(model.decoder.vocabulary),
            "blank_id": len(model.decoder.vocabulary),
            "decoding": _plain(model.cfg.decoding),
            "graphs": graphs,
            "opset": OPSET,
            "lean_subsampling_masks": lean_masks,
            "matmul_pointwise_layers": matmul_pointwise,
        }
        _write_metadata(staging, metadata)
        if settings.int8:
            features, feature_lengths = OnnxCtcModel(staging).features(audios)
            calibration = [{"audio_signal": features[i : i + 1, :, : int(n)].numpy(),
                            "length": feature_lengths[i : i + 1].numpy().astype(np.int64)}
                           for i, n in enumerate(feature_lengths)]
            quantize_int8(staging / GRAPHS["fp32"], staging / GRAPHS["int8"], settings, calibration)
            graphs["int8"] = GRAPHS["int8"]
            metadata["int8"] = {"method": settings.int8_method, "ops": list(settings.int8_ops)}
            _write_metadata(staging, metadata)
        parity = parity_check(staging, check_audio, audios, torch_texts, torch_log_probs)
        if parity["fp32"]["transcripts_differ"]:
            raise OnnxExportError(f"{nemo_path}: the ONNX graph's greedy transcripts differ from PyTorch's on "
                                  f"{parity['fp32']['transcripts_differ']} of {len(audios)} files; nothing written")
        metadata["parity"] = parity
        _write_metadata(staging, metadata)
        _replace_folder(staging, out_dir)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return ExportReport(out_dir, graphs, parity)


def int8_export_beside(nemo_path: Path, say) -> Path:
    """The int8 export in the model's default export folder (``<stem>_onnx/``), made once, checked on the bundled
    sample's first files when missing (``say`` tells the console so); the folder."""
    export = default_export_dir(nemo_path)
    if not (export / METADATA).is_file():
        say(f"exporting {nemo_path} to {export} (once)")
        export_onnx(nemo_path, export, [str(p) for p in sorted(SAMPLES_DIR.rglob("*.flac"))[:4]],
                    OnnxExportSettings(int8=True))
    return export


def _torch_log_probs(model, audios):
    """PyTorch's log-probs of ``audios`` in one zero-padded batch."""
    signal, lengths = pad_batch(audios)
    with torch.inference_mode():
        return model.forward(input_signal=signal, input_signal_length=lengths)[0]


def parity_check(folder: Path, paths, audios, torch_texts: list[str], torch_log_probs) -> dict:
    """Greedy transcripts of each graph in ``folder`` against PyTorch's, and the largest log-prob difference."""
    result = {"files": [str(p) for p in paths], "torch_transcripts": torch_texts}
    for precision in read_graphs(folder):
        onnx_model = OnnxCtcModel(folder, int8=precision == "int8")
        # one padded batch on one session, as PyTorch's: the padding is what the export's masks must get right
        texts = transcribe_audio(onnx_model, audios, batch_size=len(audios), workers=1)
        log_probs, lengths = onnx_model.log_probs(audios)
        valid = torch.arange(log_probs.shape[1])[None, :] < lengths[:, None]  # padding frames do not count
        diff = (log_probs - torch_log_probs).abs()[valid]
        result[precision] = {"transcripts_differ": sum(a != b for a, b in zip(texts, torch_texts)),
                             "max_abs_log_prob_diff": float(diff.max()) if diff.numel() else 0.0}
    return result


def read_graphs(folder: Path) -> dict[str, str]:
    return json.loads((folder / METADATA).read_text(encoding="utf-8"))["graphs"]


def _plain(cfg) -> dict:
    return OmegaConf.to_container(cfg, resolve=True)


def _write_metadata(folder: Path, metadata: dict) -> None:
    write_text_atomic(folder / METADATA, json.dumps(metadata, indent=2) + "\n")


def _replace_folder(staging: Path, out_dir: Path) -> None:
    """Move the finished ``staging`` folder to ``out_dir``; an earlier export there goes only once the new one is in."""
    old = None
    if out_dir.exists():
        old = out_dir.with_name(f".{out_dir.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        os.replace(out_dir, old)
    os.replace(staging, out_dir)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def export_summary(report: ExportReport) -> str:
    """One line per graph: file, size, transcripts differing from PyTorch's, largest log-prob difference."""
    lines = []
    n = len(report.parity.get("files", []))
    for precision, name in report.graphs.items():
        p = report.parity[precision]
        size = (report.folder / name).stat().st_size / 1e6
        lines.append(f"{precision}: {report.folder / name} ({size:.1f} MB), greedy transcripts differing from "
                     f"PyTorch's: {p['transcripts_differ']}/{n}, max |log-prob diff| {p['max_abs_log_prob_diff']:.2g}")
    return "\n".join(lines)


