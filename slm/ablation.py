"""Structural ablations of a GPT-2 model: remove layers, prune attention heads, narrow the FFN.

transformers 5 dropped ``prune_heads``, so heads are pruned by slicing the fused projections.
GPT-2's ``Conv1D`` stores its weight as (in_features, out_features), the transpose of ``nn.Linear``:
``c_attn.weight`` is (E, 3E) with the query, key and value blocks side by side along the columns,
each block holding the heads in order; ``attn.c_proj.weight`` is (E, E) with one row band per head.
Which heads / neurons to keep is decided by a simple magnitude score of their output weights.
Every function returns a modified deep copy and leaves the input model untouched.
"""

from __future__ import annotations

import copy

import torch

from slm.data import AlpacaCollator


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
