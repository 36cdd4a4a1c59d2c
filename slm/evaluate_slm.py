"""Evaluate a fine-tuned model folder on Alpaca rows: losses, perplexity, BLEU-1..4, ROUGE, BERTScore.

Usage:
    python slm/evaluate_slm.py experiments/slm_tiny                       # its own held-out test/validation split
    python slm/evaluate_slm.py experiments/slm_tiny --data my_rows.json   # every row of another Alpaca JSON file
    python slm/evaluate_slm.py experiments/slm_tiny --num-generate 50 --bertscore none --out /tmp/eval

Without --data the rows are the test split (answered greedily) and validation split (losses) rebuilt
from the finetune_config.yaml saved in the folder; the on-topic shares cover the spoken assistant
requests among the answered rows. Writes generations_eval.jsonl (prompt / reference /
generation), eval_summary.json (every number with the scorer that produced it) and the charts
bleu_n.png and bleu_vs_rouge.png into --out (default MODEL_DIR/eval).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from duet.foundation.errors import cli
from slm.errors import SlmError


@cli
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("--data", default=None, help="Alpaca JSON file to score instead of the held-out split")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--num-generate", type=int, default=None, help="answer only the first N rows (default all)")
    parser.add_argument("--max-new-tokens", type=int, default=None, help="default: the model's eval.max_new_tokens")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--bertscore", default="auto", help="auto, minilm, none or a local model folder")
    args = parser.parse_args(argv)

    # torch takes ~9 s to import: --help and argument errors answer before it loads
    from slm.data import load_alpaca, load_splits_for
    from slm.evaluation import assistant_text, bertscore_text, evaluate_model, write_report
    from slm.generate import load_model

    try:
        tokenizer, model = load_model(args.model_dir)
        cfg, splits = load_splits_for(args.model_dir)
        if args.data:
            splits = {"test": load_alpaca(args.data)}
            splits["validation"] = splits["test"]
    except (FileNotFoundError, ValueError) as e:
        raise SlmError(str(e)) from e
    rows = splits["test"][: args.num_generate] if args.num_generate else splits["test"]
    summary, records = evaluate_model(model, tokenizer, splits["validation"], rows, cfg.data.max_length,
                                      args.max_new_tokens or cfg.eval.max_new_tokens, args.batch_size, args.bertscore)
    summary["data"] = args.data or f"held-out split of {cfg.data.source}"
    out_dir = args.out or args.model_dir / "eval"
    write_report(out_dir, {"eval": summary}, {"eval": records})
    print(f"evaluated {len(rows)} rows: masked loss {summary['masked_loss']:.3f} (ppl {summary['perplexity']:.2f}), "
          f"unmasked loss {summary['unmasked_loss']:.3f}, BLEU-4 {summary['bleu4']:.1f}, ROUGE-L {summary['rougeL']:.1f}, "
          f"{bertscore_text(summary)}; {assistant_text(summary)}; wrote {out_dir}/eval_summary.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
