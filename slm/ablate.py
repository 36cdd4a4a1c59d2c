"""Ablation study of a fine-tuned model: fewer layers, pruned attention heads, a narrower FFN.

Usage:
    python slm/ablate.py experiments/slm_tiny                          # default grid, results in experiments/slm_tiny/ablation/
    python slm/ablate.py experiments/slm_tiny --refinetune-steps 100   # every row (baseline too) trains 100 more steps first
    python slm/ablate.py experiments/slm_tiny --num-generate 150 --bertscore minilm --out experiments/slm_tiny_ablation
    python slm/ablate.py experiments/slm_gpt2 --device cpu             # the GPU is used when there is one; force the CPU

Each variant (and the unmodified baseline) is scored on the model's own held-out rows: the
validation and test splits are rebuilt from the finetune_config.yaml saved with the model, so they
are the rows the model never trained on. Reports parameters, masked validation loss and perplexity,
and BLEU-4 / ROUGE-1/2/L of greedy answers; writes ablation.json, ablation.md and
params_vs_metric.png. Head-pruned variants are evaluated in memory (GPT2Config cannot describe them).
The work is ``slm.ablation.ablate_model``'s; this command reads the options.
"""

from __future__ import annotations

import argparse
import sys
from functools import partial
from pathlib import Path

from duet.foundation.errors import cli


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model_dir", type=Path, help="folder written by slm/finetune.py")
    parser.add_argument("--out", type=Path, default=None, help="default: MODEL_DIR/ablation")
    parser.add_argument("--num-generate", type=int, default=60, help="test rows answered per variant")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--refinetune-steps", type=int, default=0,
                        help="AdamW steps on the training split before scoring, for every variant and the baseline")
    parser.add_argument("--refinetune-lr", type=float, default=5e-4)
    parser.add_argument("--device", default="auto",
                        help="auto (default: the GPU when CUDA is available, else the CPU), cpu, cuda or cuda:N")
    parser.add_argument("--bertscore", default="none", help="none (default, faster), minilm, auto or a model folder")
    return parser


@cli
def main(argv: list[str] | None = None) -> int:
    args = get_parser().parse_args(argv)
    # torch takes ~9 s to import: --help and argument errors answer before it loads
    from slm.ablation import ablate_model

    ablate_model(args.model_dir, args.out, num_generate=args.num_generate, max_new_tokens=args.max_new_tokens,
                 refinetune_steps=args.refinetune_steps, refinetune_lr=args.refinetune_lr, device=args.device,
                 bertscore=args.bertscore, log=partial(print, flush=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
