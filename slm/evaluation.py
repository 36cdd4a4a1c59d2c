"""Score a model on held-out Alpaca rows and write the evaluation files.

``evaluate_model`` returns losses (masked / unmasked), perplexity, the text metrics of greedy
answers and, for the spoken assistant requests among the answered rows, the on-topic shares
(``slm.metrics.assistant_scores``); ``write_report`` saves ``generations*.jsonl`` (prompt / reference / generation),
``eval_summary.json`` and the charts (BLEU-1..4 bars, BLEU vs ROUGE), like the seed report's
figures 6-5 to 6-7. :func:`evaluate_folder` does both for a saved model folder (``slm/evaluate_slm.py`` is its
command line).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Sequence

from duet.foundation.files import save_png_atomic, write_jsonl_atomic, write_text_atomic
from slm.data import format_alpaca_prompt, load_alpaca, load_splits_for, tokenize_example
from slm.errors import SlmError
from slm.generation import GenerationSettings, answer_floor, generate_responses, load_model
from slm.metrics import ASSISTANT_SCORER, assistant_scores, dataset_losses, text_metrics
from slm.tool_calls import execute_calls

BLEU_KEYS = ("bleu1", "bleu2", "bleu3", "bleu4")
ROUGE_KEYS = ("rouge1", "rouge2", "rougeL")


def load_model_and_splits(model_dir: Path, device: str | None = None):
    """The tokenizer and model of ``model_dir`` and its config and splits, rebuilt from the finetune_config.yaml
    saved there (so the held-out rows are the ones it never trained on); a folder that lacks either is an
    ``SlmError`` naming what is missing."""
    try:
        tokenizer, model = load_model(model_dir, device=device)
        cfg, splits = load_splits_for(model_dir)
    except (FileNotFoundError, ValueError) as e:
        raise SlmError(str(e)) from e
    return tokenizer, model, cfg, splits


def evaluate_folder(model_dir: Path, out_dir: Path | None, *, data: str | None, num_generate: int | None,
                    max_new_tokens: int | None, batch_size: int, bertscore_model: str,
                    min_token_prob: float | None = None) -> tuple[dict, Path]:
    """Score the model in ``model_dir`` on its own held-out split (test rows answered, validation rows' losses) or,
    with ``data``, on every row of that Alpaca JSON file; the first ``num_generate`` rows are answered (None: all),
    up to ``max_new_tokens`` (None: the model's eval.max_new_tokens). Writes the report (:func:`write_report`) into
    ``out_dir`` (default ``model_dir/eval``); returns the summary and that folder. The answers are withheld below the
    model folder's floor (``slm.generation``), or below ``min_token_prob`` when given (0 = off)."""
    tokenizer, model, cfg, splits = load_model_and_splits(model_dir)
    if min_token_prob is not None:
        model.min_token_prob = min_token_prob
    if data:
        try:
            splits = {"test": load_alpaca(data)}
        except (FileNotFoundError, ValueError) as e:
            raise SlmError(str(e)) from e
        splits["validation"] = splits["test"]
    rows = splits["test"][:num_generate] if num_generate else splits["test"]
    summary, records = evaluate_model(model, tokenizer, splits["validation"], rows, cfg.data.max_length,
                                      max_new_tokens or cfg.eval.max_new_tokens, batch_size, bertscore_model)
    summary["data"] = data or f"held-out split of {cfg.data.source}"
    out_dir = out_dir or model_dir / "eval"
    write_report(out_dir, {"eval": summary}, {"eval": records})
    return summary, out_dir


def evaluate_model(model, tokenizer, loss_rows: Sequence[dict], generation_rows: Sequence[dict], max_length: int,
                   max_new_tokens: int, batch_size: int, bertscore_model: str, log=print) -> tuple[dict, list[dict]]:
    """Losses on ``loss_rows`` and greedy-answer metrics on ``generation_rows`` (both raw Alpaca rows)."""
    started = time.time()
    tokenized = [tokenize_example(row, tokenizer, max_length) for row in loss_rows]
    losses = dataset_losses(model, tokenized, tokenizer.eos_token_id, batch_size=batch_size)
    log(f"  losses on {len(loss_rows)} rows: masked {losses['masked_loss']:.4f} (ppl {losses['perplexity']:.2f}), "
        f"unmasked {losses['unmasked_loss']:.4f}")
    # plain greedy, no repetition penalty: the answer metrics of every run in RESULTS.md were measured so
    greedy = GenerationSettings(strategy="greedy", max_new_tokens=max_new_tokens, repetition_penalty=1.0)
    answers = generate_responses(model, tokenizer, generation_rows, greedy, batch_size=batch_size)
    # the answers are shown with their tool calls executed: so are the references they are scored against
    references = [execute_calls(row["output"], request=row["instruction"]).text for row in generation_rows]
    scores = {**text_metrics(answers, references, bertscore_model=bertscore_model),
              **assistant_scores([{**row, "output": ref} for row, ref in zip(generation_rows, references)], answers)}
    scores["scorers"]["assistant"] = ASSISTANT_SCORER
    log(f"  greedy answers to {len(answers)} rows: BLEU-4 {scores['bleu4']:.2f}, ROUGE-L {scores['rougeL']:.2f}, "
        f"{bertscore_text(scores)} ({time.time() - started:.0f} s)")
    log(f"  {assistant_text(scores)}")
    records = [{"prompt": format_alpaca_prompt(row["instruction"], row["input"]), "instruction": row["instruction"],
                "input": row["input"], "reference": ref, "generation": gen}
               for row, ref, gen in zip(generation_rows, references, answers)]
    summary = {**losses, **scores, "loss_rows": len(loss_rows), "generation_rows": len(generation_rows),
               "decoding": f"greedy, max_new_tokens={max_new_tokens}, min_token_prob={answer_floor(model, greedy):g}"}
    return summary, records


def bertscore_text(summary: dict) -> str:
    """``BERTScore F1 87.12 (all-MiniLM-L6-v2)``: the number always travels with the model that produced it."""
    if "bertscore_f1" not in summary:
        return "BERTScore F1 n/a"
    return f"BERTScore F1 {summary['bertscore_f1']:.2f} ({summary['bertscore_model']})"


def assistant_text(summary: dict) -> str:
    """One line with the on-topic shares of ``slm.metrics.assistant_scores``."""
    if not summary["assistant_rows"]:
        return "no spoken assistant requests among the answered rows"
    return (f"spoken assistant requests ({summary['assistant_rows']}): right kind {summary['assistant_kind']:.0f} %, "
            f"all slot words {summary['assistant_slots']:.0f} %, both (on topic) {summary['assistant_on_topic']:.0f} %, "
            f"exact {summary['assistant_exact']:.0f} %")


def write_report(out_dir: Path, results: dict[str, dict], records: dict[str, list[dict]]) -> None:
    """``results`` maps a label (``before``, ``after``, a variant name) to its summary."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for label, rows in records.items():
        write_jsonl_atomic(out_dir / f"generations_{label}.jsonl", rows)
    write_text_atomic(out_dir / "eval_summary.json", json.dumps(results, indent=2) + "\n")
    plot_bleu_rouge(results, out_dir)


def plot_bleu_rouge(results: dict[str, dict], out_dir: Path) -> None:
    """``bleu_n.png``: BLEU-1..4 per label; ``bleu_vs_rouge.png``: BLEU-4 and ROUGE-1/2/L per label."""
    # pyplot takes ~3.5 s to import: only the calls that use it pay for it
    import matplotlib.pyplot as plt

    plt.switch_backend("Agg")  # files only: no display is needed or assumed

    labels = list(results)
    width = 0.8 / max(len(labels), 1)
    for filename, keys, title in (("bleu_n.png", BLEU_KEYS, "BLEU-n of greedy answers (sacrebleu)"),
                                  ("bleu_vs_rouge.png", ("bleu4",) + ROUGE_KEYS, "BLEU-4 vs ROUGE F1 (greedy answers)")):
        fig, ax = plt.subplots(figsize=(7, 4))
        for i, label in enumerate(labels):
            xs = [k + i * width for k in range(len(keys))]
            bars = ax.bar(xs, [results[label].get(key, 0.0) for key in keys], width=width, label=label)
            ax.bar_label(bars, fmt="%.1f", fontsize=7)
        ax.set_xticks([k + width * (len(labels) - 1) / 2 for k in range(len(keys))], [k.upper() for k in keys])
        ax.set_ylabel("score (0-100)")
        ax.set_title(title)
        ax.legend()
        save_png_atomic(fig, out_dir / filename)
