#!/usr/bin/env python
r"""Export a NeMo CTC .nemo to ONNX for fast CPU transcription (``--engine onnx``).

Usage:
  # <stem>_onnx/ beside the .nemo: model.onnx, tokenizer.model, metadata.json
  python tools/export_onnx.py experiments/demo_asr/demo_asr.nemo
  # also model.int8.onnx (ONNX Runtime dynamic quantisation of the matrix products), into a folder of your own
  python tools/export_onnx.py base.nemo exports/base_onnx --int8
  # int8 with activation ranges calibrated on the parity-check files instead (static, QDQ)
  python tools/export_onnx.py base.nemo --int8 --int8-method static --check-audio a.flac b.flac c.flac
  # then
  python nemo_recipes/evaluate_ctc.py --model base.nemo --engine onnx --int8 --manifest manifests/test-clean.json
  python tools/pipeline.py talk.flac --asr-model base.nemo --engine onnx

The encoder and CTC head go through NeMo's own exporter (``model.export``) as one graph with dynamic batch and
time (the 2-D subsampling keeps only the padding masks that a valid frame depends on: the same outputs with fewer
operations, ``duet.asr.onnx_export.LeanMaskedConvSequential``); the log-mel features are computed outside it by the model's own NeMo preprocessor, and metadata.json
beside the graph holds the preprocessor config, the encoder's subsampling, the vocabulary and the decoding
config, so greedy, beam and beam + LM decoding all run on the ONNX log-probs. Before anything is written,
the greedy transcripts of --check-audio (default: the first 8 files of the bundled sample's test-clean) through
the graph are compared with PyTorch's: an fp32 mismatch is an error, int8 differences are reported. The folder
is written under a temporary name and renamed into place (an earlier export is replaced only when the new one
is complete).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from duet import SAMPLES_DIR
from duet.asr.onnx_engine import OnnxExportError, default_export_dir
from duet.asr.onnx_export import INT8_METHODS, OnnxExportSettings, export_onnx, export_summary
from duet.foundation.files import add_log_arguments, log_target
from duet.foundation.errors import cli
from duet.foundation.files import library_output_to

CHECK_SPLIT = SAMPLES_DIR / "LibriSpeech" / "test-clean"
CHECK_FILES = 8


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", type=Path, help="a CTC .nemo checkpoint (SentencePiece tokenizer)")
    parser.add_argument("out_dir", type=Path, nargs="?", default=None,
                        help="export folder (default: <stem>_onnx/ beside the .nemo, where --engine onnx looks)")
    parser.add_argument("--int8", action="store_true", help="also write model.int8.onnx (ONNX Runtime quantisation)")
    parser.add_argument("--int8-method", choices=INT8_METHODS, default=OnnxExportSettings.int8_method,
                        help="dynamic: activations quantised per batch at run time; static: ranges calibrated on "
                             f"--check-audio (default: {OnnxExportSettings.int8_method})")
    parser.add_argument("--check-audio", nargs="+", type=Path, default=None,
                        help=f"files for the parity check (default: the first {CHECK_FILES} of {CHECK_SPLIT})")
    add_log_arguments(parser, "export_onnx")
    return parser


@cli
def main(argv=None) -> int:
    args = get_parser().parse_args(argv)
    if not args.model.is_file():
        raise OnnxExportError(f"model file not found: {args.model}")
    if args.int8_method != OnnxExportSettings.int8_method and not args.int8:
        raise OnnxExportError("--int8-method needs --int8")
    check_audio = args.check_audio or sorted(CHECK_SPLIT.rglob("*.flac"))[:CHECK_FILES]
    for path in check_audio:
        if not path.is_file():
            raise OnnxExportError(f"--check-audio: file not found: {path}")
    out_dir = args.out_dir or default_export_dir(args.model)
    with library_output_to(log_target(args)):  # NeMo's and the exporter's lines
        report = export_onnx(args.model, out_dir, check_audio, OnnxExportSettings(int8=args.int8,
                                                                                   int8_method=args.int8_method))
    print(export_summary(report))
    print(f"export_onnx: wrote {out_dir} (checked on {len(check_audio)} files)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
