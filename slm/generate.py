"""Answer instructions with a fine-tuned GPT-2 folder: greedy, beam search or sampling, with the KV cache.

Usage:
    python slm/generate.py experiments/slm_tiny "set a timer for ten minutes"
    python slm/generate.py experiments/slm_tiny "Sort the numbers in ascending order." --input "5, 2, 9"
    python slm/generate.py experiments/slm_tiny "play some jazz" --strategy sample --temperature 0.7 --top-k 40 --top-p 0.9
    python slm/generate.py experiments/slm_tiny "what is seven plus five" --strategy beam --num-beams 4
    echo "turn off the kitchen lights" | python slm/generate.py experiments/slm_tiny -      # one instruction per line

The decoding flags and their defaults are the voice pipeline's (``slm.generation.GenerationSettings``); the
loading and decoding are ``slm.generation``'s (the library the pipeline answers with), this command only reads
the options and prints the answers (an answer withheld below the model's ``answer.min_token_prob``, replaced by a
decline, is named on standard error); transformers' lines (loading the weights, its warnings) go to --log
(experiments/logs/generate.log), or with --verbose to standard error.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

import torch

from duet.foundation.errors import cli
from duet.foundation.files import add_log_arguments, library_output_to, log_target
from slm.generation import add_generation_arguments, generation_settings_from_args, load_model, respond_with_calls


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model_dir", help="folder written by slm/finetune.py")
    parser.add_argument("instruction", help="the request; '-' reads one instruction per line from stdin")
    parser.add_argument("--input", default="", help="optional Alpaca input field")
    parser.add_argument("--seed", type=int, default=0, help="for sampling")
    add_generation_arguments(parser)
    add_log_arguments(parser, "generate")
    return parser


@cli
def main(argv: Sequence[str] | None = None) -> int:
    args = get_parser().parse_args(argv)
    settings = generation_settings_from_args(args)
    instructions = [line.strip() for line in sys.stdin if line.strip()] if args.instruction == "-" else [args.instruction]
    with library_output_to(log_target(args)) as (out, _):
        tokenizer, model = load_model(args.model_dir)
        torch.manual_seed(args.seed)
        for instruction in instructions:
            answer = respond_with_calls(model, tokenizer, instruction, args.input, settings)
            print(answer.text if len(instructions) == 1 else f"{instruction}\t{answer.text}", file=out, flush=True)
            if answer.withheld is not None:  # standard output stays the answers a user reads, one a line
                which = "" if len(instructions) == 1 else f" for {instruction!r}"
                print(f"generate: withheld{which} (the model was unsure of it): {answer.withheld}", file=sys.stderr,
                      flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
