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
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

from duet.foundation.errors import cli
from duet.foundation.files import save_png_atomic, write_text_atomic
from slm.errors import SlmError


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


def plot_params_vs_metric(results: dict, path: Path) -> None:
    # pyplot takes ~3.5 s to import: --help and argument errors answer before it loads
    import matplotlib.pyplot as plt

    plt.switch_backend("Agg")  # files only: no display is needed or assumed

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, key, label in ((axes[0], "perplexity", "validation perplexity (answer tokens)"),
                           (axes[1], "rougeL", "ROUGE-L F1 of greedy answers")):
        for name, r in results.items():
            ax.scatter(r["parameters"] / 1e6, r[key])
            ax.annotate(name, (r["parameters"] / 1e6, r[key]), fontsize=7, xytext=(3, 3), textcoords="offset points")
        ax.set_xlabel("parameters (M)")
        ax.set_ylabel(label)
    axes[0].set_yscale("log")
    axes[0].yaxis.set_major_formatter("{x:g}")
    axes[0].yaxis.set_minor_formatter("{x:g}")
    fig.suptitle("Ablations: parameters vs quality")
    save_png_atomic(fig, path)


def markdown_table(results: dict) -> str:
    """One row per variant; a BERTScore column (named after its model) only when it was computed."""
    bertscore_model = next(iter(results.values())).get("bertscore_model")
    extra = f" BERTScore F1 ({bertscore_model}) |" if bertscore_model else ""
    lines = ["| variant | parameters | val loss (masked) | perplexity | BLEU-4 | ROUGE-1 | ROUGE-2 | ROUGE-L |" + extra,
             "|---|---:|---:|---:|---:|---:|---:|---:|" + ("---:|" if extra else "")]
    for name, r in results.items():
        lines.append(f"| {name} | {r['parameters']:,} | {r['masked_loss']:.3f} | {r['perplexity']:.2f} | "
                     f"{r['bleu4']:.1f} | {r['rouge1']:.1f} | {r['rouge2']:.1f} | {r['rougeL']:.1f} |"
                     + (f" {r['bertscore_f1']:.1f} |" if extra else ""))
    return "\n".join(lines) + "\n"


@cli
def main(argv: list[str] | None = None) -> int:
    args = get_parser().parse_args(argv)
    # torch takes ~9 s to import: --help and argument errors answer before it loads
    from slm.ablation import default_variants, short_finetune
    from slm.data import load_splits_for, tokenize_example
    from slm.evaluation import evaluate_model
    from slm.generate import load_model, pick_device
    from slm.modeling import count_parameters

    try:
        tokenizer, model = load_model(args.model_dir, device=pick_device(args.device))
        cfg, splits = load_splits_for(args.model_dir)
    except (FileNotFoundError, ValueError) as e:
        raise SlmError(str(e)) from e
    out_dir = args.out or args.model_dir / "ablation"
    train_rows = [tokenize_example(r, tokenizer, cfg.data.max_length) for r in splits["train"]]
    test_rows = splits["test"][: args.num_generate]
    variants = {"baseline": (None, None), **default_variants(model.config)}
    results, started = {}, time.time()
    for index, (name, (make_variant, argument)) in enumerate(variants.items(), 1):
        variant = copy.deepcopy(model) if make_variant is None else make_variant(model, argument)
        print(f"[{index}/{len(variants)}] {name}: {count_parameters(variant):,} parameters", flush=True)
        if args.refinetune_steps:
            # The baseline gets the same extra steps: otherwise a variant's gain from more training would
            # look like a gain from the ablation.
            short_finetune(variant, train_rows, tokenizer.eos_token_id, args.refinetune_steps, args.refinetune_lr,
                           cfg.train.batch_size, cfg.seed, mask_prompt=cfg.data.mask_prompt)
        summary, _ = evaluate_model(variant, tokenizer, splits["validation"], test_rows, cfg.data.max_length,
                                    args.max_new_tokens, cfg.eval.batch_size, args.bertscore,
                                    log=lambda line: print(line, flush=True))
        results[name] = {"parameters": count_parameters(variant), "refinetune_steps": args.refinetune_steps, **summary}
    write_text_atomic(out_dir / "ablation.json", json.dumps(results, indent=2) + "\n")
    caption = (f"Every row re-fine-tuned {args.refinetune_steps} AdamW steps (lr {args.refinetune_lr:g}) before scoring.\n\n"
               if args.refinetune_steps else "No re-fine-tuning: variants scored as cut.\n\n")
    write_text_atomic(out_dir / "ablation.md", caption + markdown_table(results))
    plot_params_vs_metric(results, out_dir / "params_vs_metric.png")
    print(caption + markdown_table(results))
    print(f"ablated {len(variants) - 1} variants in {time.time() - started:.0f} s; wrote {out_dir}/ablation.md, "
          f"ablation.json, params_vs_metric.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
