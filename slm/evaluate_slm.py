"""Evaluate a fine-tuned model folder on Alpaca rows: losses, perplexity, BLEU-1..4, ROUGE, BERTScore.

Usage:
    python slm/evaluate_slm.py experiments/slm_tiny                       # its own held-out test/validation split
    python slm/evaluate_slm.py experiments/slm_tiny --data my_rows.json   # every row of another Alpaca JSON file
    python slm/evaluate_slm.py experiments/slm_tiny --num-generate 50 --bertscore none --out /tmp/eval

Without --data the rows are the test split (answered greedily) and validation split (losses) rebuilt
from the finetune_config.yaml saved in the folder; the on-topic shares cover the spoken assistant
requests among the answered rows. Writes generations_eval.jsonl (prompt / reference /
generation), eval_summary.json (every number with the scorer that produced it) and the charts
bleu_n.png and bleu_vs_rouge.png into --out (default MODEL_DIR/eval). The work is
``slm.evaluation.evaluate_folder``'s; this command reads the options.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from duet.foundation.errors import cli


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
    parser.add_argument("--min-token-prob", type=float, default=None,
                        help="withhold answers below this token probability (default: the model folder's own "
                             "answer.min_token_prob; 0 = off)")
    args = parser.parse_args(argv)
    if args.min_token_prob is not None and not 0 <= args.min_token_prob <= 1:
        parser.error(f"--min-token-prob must be in [0, 1] (0 = off), got {args.min_token_prob:g}")

    # torch takes ~9 s to import: --help and argument errors answer before it loads
    from slm.evaluation import assistant_text, bertscore_text, evaluate_folder

    summary, out_dir = evaluate_folder(args.model_dir, args.out, data=args.data, num_generate=args.num_generate,
                                       max_new_tokens=args.max_new_tokens, batch_size=args.batch_size,
                                       bertscore_model=args.bertscore, min_token_prob=args.min_token_prob)
    print(f"evaluated {summary['generation_rows']} rows: masked loss {summary['masked_loss']:.3f} "
          f"(ppl {summary['perplexity']:.2f}), unmasked loss {summary['unmasked_loss']:.3f}, "
          f"BLEU-4 {summary['bleu4']:.1f}, ROUGE-L {summary['rougeL']:.1f}, {bertscore_text(summary)}; "
          f"{assistant_text(summary)}; wrote {out_dir}/eval_summary.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
