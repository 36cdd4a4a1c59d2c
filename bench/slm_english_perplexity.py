"""Perplexity of SLM model folders on general English held out of every training set.

Usage:
    python bench/slm_english_perplexity.py experiments/slm_tiny experiments/slm_whisper experiments/whisper_tiny_en_gpt2
    python bench/slm_english_perplexity.py experiments/slm_whisper --sentences 2000 --json experiments/bench/english_ppl.json
    python bench/slm_english_perplexity.py experiments/whisper_tiny_en_gpt2 --text common_voice --text read_sentences

The texts (--text, repeatable; default wordnet):
  wordnet         WordNet 3.0's usage examples as written (Debian wordnet-base), the fixed "test" tenth of
                  duet.data.english_text (never used by tools/whisper_to_gpt2.py, which averages over the "estimate"
                  part; none is in samples/alpaca_sample.json), --sentences of them spread over the part
  common_voice,   the transcripts of those held-out sets of ../shared/real_speech (--real-speech), written as
  read_sentences  sentences (duet.data.english_text.as_sentence: lower case, first letter and "I" capitalised, a full
                  stop; names stay lower case). Evaluation only, as the folder's README allows
Each text is read after what the model's tokenizer puts first (one <|endoftext|> where it puts nothing) and ends
with <|endoftext|>; every token of it and that end is scored (slm.metrics.text_log_likelihood). The figure to
compare across models is the word perplexity (summed log-likelihood over whitespace words + the final EOS):
models with different tokenizers (the scratch preset's 1,024-token BPE, GPT-2's 50,257) are comparable on it;
token perplexity is printed too.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from duet.data.english_text import HELD_OUT_TEXTS, held_out_english
from duet.data.real_speech import DEFAULT_ROOT
from duet.foundation.errors import cli
from duet.foundation.files import write_text_atomic


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("models", nargs="+", type=Path, help="model folders (slm/finetune.py outputs or converted ones)")
    parser.add_argument("--text", action="append", choices=HELD_OUT_TEXTS, default=None,
                        help="held-out text to score, repeatable (default: wordnet)")
    parser.add_argument("--sentences", type=int, default=500, help="held-out WordNet sentences (default: 500)")
    parser.add_argument("--real-speech", type=Path, default=DEFAULT_ROOT,
                        help=f"the real-speech folder the transcript texts come from (default: {DEFAULT_ROOT})")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default: 1)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    return parser


@cli
def main(argv: list[str] | None = None) -> int:
    args = get_parser().parse_args(argv)
    # torch takes ~9 s to import: --help and argument errors answer before it loads
    import torch

    from slm.generation import load_model
    from slm.metrics import text_log_likelihood

    torch.set_num_threads(args.threads)
    texts = {name: held_out_english(name, args.sentences, "test", args.real_speech) for name in args.text or ["wordnet"]}
    results = {"texts": {name: described for name, (described, _) in texts.items()}, "models": {}}
    for folder in args.models:
        started = time.time()
        tokenizer, model = load_model(folder, device="cpu")
        results["models"][str(folder)] = {}
        for name, (_, sentences) in texts.items():
            scores = text_log_likelihood(model, tokenizer, sentences, batch_size=args.batch_size)
            results["models"][str(folder)][name] = scores
            print(f"{folder} on {name}: word perplexity {scores['word_perplexity']:.1f}, token perplexity "
                  f"{scores['token_perplexity']:.1f} ({scores['tokens']} tokens, vocab {len(tokenizer)}; "
                  f"{time.time() - started:.0f} s)", flush=True)
    if args.json:
        write_text_atomic(args.json, json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
