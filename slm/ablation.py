"""Structural ablations of a GPT-2 model: remove layers, prune attention heads, narrow the FFN.

transformers 5 dropped ``prune_heads``, so heads are pruned by slicing the fused projections.
GPT-2's ``Conv1D`` stores its weight as (in_features, out_features), the transpose of ``nn.Linear``:
``c_attn.weight`` is (E, 3E) with the query, key and value blocks side by side along the columns,
each block holding the heads in order; ``attn.c_proj.weight`` is (E, E) with one row band per head.
Which heads / neurons to keep is decided by a simple magnitude score of their output weights.
Every variant function returns a modified deep copy and leaves the input model untouched.

:func:`ablate_model` scores the default grid of a saved model (``slm/ablate.py`` is its command line) and writes
ablation.json, ablation.md and params_vs_metric.png.
"""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path

import torch

from duet.foundation.files import save_png_atomic, write_text_atomic
from slm.data import AlpacaCollator, tokenize_example
from slm.evaluation import evaluate_model, load_model_and_splits
from slm.generation import pick_device
from slm.modeling import count_parameters


def drop_layers(model, keep: list[int]):
    """Keep only the transformer blocks whose indices are in ``keep`` (in order)."""
    n_layer = model.config.n_layer
    if not keep or any(i < 0 or i >= n_layer for i in keep) or len(set(keep)) != len(keep):
        raise ValueError(f"layers to keep must be distinct indices in 0..{n_layer - 1}, got {keep}")
    pruned = copy.deepcopy(model)
    blocks = [pruned.transformer.h[i] for i in sorted(keep)]
    for new_index, block in enumerate(blocks):
        block.attn.layer_idx = new_index  # the KV cache is indexed by layer position
    pruned.transformer.h = torch.nn.ModuleList(blocks)
    pruned.config.n_layer = len(blocks)
    return pruned


def _keep_columns(conv, index: torch.Tensor) -> None:
    conv.weight = torch.nn.Parameter(conv.weight.data[:, index].clone())
    conv.bias = torch.nn.Parameter(conv.bias.data[index].clone())
    conv.nf = len(index)


def _keep_rows(conv, index: torch.Tensor) -> None:
    conv.weight = torch.nn.Parameter(conv.weight.data[index, :].clone())
    conv.nx = len(index)


def head_importance(attn) -> torch.Tensor:
    """L2 norm of each head's rows in the output projection: a head that writes little matters little."""
    rows = attn.c_proj.weight.data.view(attn.num_heads, attn.head_dim, -1)
    return rows.flatten(1).norm(dim=1)


def prune_heads(model, heads_per_layer: int):
    """Keep the ``heads_per_layer`` most important heads in every layer.

    The result runs and generates, but cannot be saved as a plain ``GPT2Config`` (which ties the
    attention width to ``n_embd``); evaluate it in memory.
    """
    n_head = model.config.n_head
    if not 1 <= heads_per_layer <= n_head:
        raise ValueError(f"heads per layer must be in 1..{n_head}, got {heads_per_layer}")
    pruned = copy.deepcopy(model)
    for block in pruned.transformer.h:
        attn = block.attn
        d, width = attn.head_dim, attn.split_size
        kept_heads = head_importance(attn).topk(heads_per_layer).indices.sort().values
        within = torch.cat([torch.arange(h * d, (h + 1) * d) for h in kept_heads.tolist()])
        _keep_columns(attn.c_attn, torch.cat([within, within + width, within + 2 * width]))  # q, k, v blocks
        _keep_rows(attn.c_proj, within)
        attn.num_heads = heads_per_layer
        attn.split_size = heads_per_layer * d
    pruned.config.ablation_heads_per_layer = heads_per_layer
    return pruned


def shrink_ffn(model, inner_size: int):
    """Keep the ``inner_size`` FFN neurons per layer with the largest in x out weight norms."""
    current = model.transformer.h[0].mlp.c_fc.nf
    if not 1 <= inner_size <= current:
        raise ValueError(f"FFN width must be in 1..{current}, got {inner_size}")
    pruned = copy.deepcopy(model)
    for block in pruned.transformer.h:
        mlp = block.mlp
        score = mlp.c_fc.weight.data.norm(dim=0) * mlp.c_proj.weight.data.norm(dim=1)
        kept = score.topk(inner_size).indices.sort().values
        _keep_columns(mlp.c_fc, kept)
        _keep_rows(mlp.c_proj, kept)
    pruned.config.n_inner = inner_size  # a GPT2Config field, so this variant saves and reloads
    return pruned


def default_variants(config) -> dict[str, tuple]:
    """Name -> (function, argument): a standard grid for a model of this size."""
    n_layer, n_head = config.n_layer, config.n_head
    inner = config.n_inner or 4 * config.n_embd
    variants = {}
    for keep in sorted({n_layer - 1, max(n_layer // 2, 1)}, reverse=True):
        if keep < n_layer:
            variants[f"layers_{keep}of{n_layer}"] = (drop_layers, list(range(keep)))
    for heads in sorted({n_head // 2, max(n_head // 4, 1)}, reverse=True):
        if 1 <= heads < n_head:
            variants[f"heads_{heads}of{n_head}"] = (prune_heads, heads)
    for fraction in (2, 4):
        variants[f"ffn_{inner // fraction}of{inner}"] = (shrink_ffn, inner // fraction)
    return variants


def short_finetune(model, rows: list[dict], pad_token_id: int, steps: int, learning_rate: float, batch_size: int,
                   seed: int, mask_prompt: bool = False, log=print) -> list[float]:
    """A few AdamW steps on tokenised rows to let a pruned model recover; returns the step losses."""
    collate = AlpacaCollator(pad_token_id, mask_prompt=mask_prompt)
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=0.1)
    model.train()
    losses = []
    for step in range(steps):
        picks = torch.randint(len(rows), (batch_size,), generator=generator).tolist()
        batch = {k: v.to(model.device) for k, v in collate([rows[i] for i in picks]).items()}
        loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
        if (step + 1) % max(steps // 4, 1) == 0:
            log(f"    re-fine-tune step {step + 1}/{steps}: loss {loss.item():.4f}")
    model.eval()
    return losses


def ablate_model(model_dir: Path, out_dir: Path | None, *, num_generate: int, max_new_tokens: int,
                 refinetune_steps: int, refinetune_lr: float, device: str, bertscore: str, log=print) -> dict:
    """Score the baseline and every :func:`default_variants` variant of the model in ``model_dir`` on its own
    held-out rows (``num_generate`` test rows answered greedily, the validation split's losses), each first
    re-fine-tuned ``refinetune_steps`` AdamW steps when asked; write ablation.json, ablation.md and
    params_vs_metric.png into ``out_dir`` (default ``model_dir/ablation``) and return the results by variant."""
    tokenizer, model, cfg, splits = load_model_and_splits(model_dir, device=pick_device(device))
    out_dir = out_dir or model_dir / "ablation"
    train_rows = [tokenize_example(r, tokenizer, cfg.data.max_length) for r in splits["train"]]
    test_rows = splits["test"][:num_generate]
    variants = {"baseline": (None, None), **default_variants(model.config)}
    results, started = {}, time.time()
    for index, (name, (make_variant, argument)) in enumerate(variants.items(), 1):
        variant = copy.deepcopy(model) if make_variant is None else make_variant(model, argument)
        log(f"[{index}/{len(variants)}] {name}: {count_parameters(variant):,} parameters")
        if refinetune_steps:
            # The baseline gets the same extra steps: otherwise a variant's gain from more training would
            # look like a gain from the ablation.
            short_finetune(variant, train_rows, tokenizer.eos_token_id, refinetune_steps, refinetune_lr,
                           cfg.train.batch_size, cfg.seed, mask_prompt=cfg.data.mask_prompt, log=log)
        summary, _ = evaluate_model(variant, tokenizer, splits["validation"], test_rows, cfg.data.max_length,
                                    max_new_tokens, cfg.eval.batch_size, bertscore, log=log)
        results[name] = {"parameters": count_parameters(variant), "refinetune_steps": refinetune_steps, **summary}
    write_text_atomic(out_dir / "ablation.json", json.dumps(results, indent=2) + "\n")
    caption = (f"Every row re-fine-tuned {refinetune_steps} AdamW steps (lr {refinetune_lr:g}) before scoring.\n\n"
               if refinetune_steps else "No re-fine-tuning: variants scored as cut.\n\n")
    write_text_atomic(out_dir / "ablation.md", caption + markdown_table(results))
    plot_params_vs_metric(results, out_dir / "params_vs_metric.png")
    log(caption + markdown_table(results))
    log(f"ablated {len(variants) - 1} variants in {time.time() - started:.0f} s; wrote {out_dir}/ablation.md, "
        f"ablation.json, params_vs_metric.png")
    return results


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
