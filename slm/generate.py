"""Answer instructions with a fine-tuned GPT-2 folder: greedy, beam search or sampling, with the KV cache.

Usage:
    python slm/generate.py exp/slm_tiny "set a timer for ten minutes"
    python slm/generate.py exp/slm_tiny "Sort the numbers in ascending order." --input "5, 2, 9"
    python slm/generate.py exp/slm_tiny "play some jazz" --strategy sample --temperature 0.7 --top-k 40 --top-p 0.9
    python slm/generate.py exp/slm_tiny "what is seven plus five" --strategy beam --num-beams 4
    echo "turn off the kitchen lights" | python slm/generate.py exp/slm_tiny -      # one instruction per line

Library use (the voice pipeline): ``tokenizer, model = load_model(path)`` then
``respond(model, tokenizer, "set a timer", strategy="greedy", max_new_tokens=64)``.
Decoding is ``transformers``' ``generate`` with ``use_cache=True``; it stops at the EOS token.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Sequence

import torch

from slm.data import format_alpaca_prompt
from slm.errors import DuetError, cli, first_line

STRATEGIES = ("greedy", "beam", "sample")


def decoding_kwargs(strategy: str = "greedy", max_new_tokens: int = 128, num_beams: int = 4,
                    temperature: float = 1.0, top_k: int = 50, top_p: float = 1.0,
                    repetition_penalty: float = 1.0) -> dict:
    """Keyword arguments for ``model.generate`` for one decoding strategy; wrong values raise ValueError.

    Every value is checked whatever the strategy, so a bad one fails here rather than inside ``generate``.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"decoding strategy must be one of {', '.join(STRATEGIES)}, got '{strategy}'")
    for name, value, ok, rule in (("max_new_tokens", max_new_tokens, max_new_tokens >= 1, ">= 1"),
                                  ("repetition_penalty", repetition_penalty, repetition_penalty > 0, "> 0"),
                                  ("top_k", top_k, top_k >= 0, ">= 0 (0 = off)"),
                                  ("top_p", top_p, 0 < top_p <= 1, "in (0, 1]")):
        if not ok:
            raise ValueError(f"{name} must be {rule}, got {value}")
    kwargs = {"max_new_tokens": max_new_tokens, "repetition_penalty": repetition_penalty, "use_cache": True}
    if strategy == "greedy":
        return {**kwargs, "do_sample": False, "num_beams": 1}
    if strategy == "beam":
        if num_beams < 2:
            raise ValueError(f"beam search needs num_beams >= 2, got {num_beams}")
        return {**kwargs, "do_sample": False, "num_beams": num_beams, "early_stopping": True}
    if temperature <= 0:
        raise ValueError(f"sampling needs temperature > 0, got {temperature}")
    return {**kwargs, "do_sample": True, "temperature": temperature, "top_k": top_k, "top_p": top_p}


# decoding_kwargs' parameters, each also an entry script's option (--max-new-tokens lands in max_new_tokens)
DECODING_PARAMETERS = ("strategy", "max_new_tokens", "num_beams", "temperature", "top_k", "top_p",
                       "repetition_penalty")


def as_flags(error: ValueError) -> str:
    """A ``decoding_kwargs`` message with its parameter names spelt as the command-line flags users typed."""
    numbers = "|".join(DECODING_PARAMETERS[1:])  # not "strategy": its message reads "decoding strategy must be"
    return re.sub(rf"\b({numbers})\b",
                  lambda match: "--" + match.group(1).replace("_", "-"), str(error))


def decoding_from_args(args) -> dict:
    """The decoding options of an entry script's parsed ``args``, checked by ``decoding_kwargs`` up front.

    A bad value is a ValueError naming its flag, before any model loads.
    """
    decoding = {name: getattr(args, name) for name in DECODING_PARAMETERS}
    try:
        decoding_kwargs(**decoding)
    except ValueError as e:
        raise ValueError(as_flags(e)) from None
    return decoding


class SlmModelError(DuetError, ValueError):
    """A language-model folder that cannot be loaded (missing or corrupt files), named in the message."""


def load_model(path: str | Path, device: str | None = None):
    """Tokenizer and model from a folder written by ``slm/finetune.py`` (or any GPT-2 HF folder).

    A folder that is not one, or whose files are missing or corrupt, is an ``SlmModelError`` naming it.
    """
    from safetensors import SafetensorError
    from transformers import AutoTokenizer, GPT2LMHeadModel

    path = Path(path)
    if not (path / "config.json").is_file():
        raise SlmModelError(f"{path}: not a model folder (no config.json); train one with slm/finetune.py")
    # without these AutoTokenizer falls back to an almost empty vocabulary instead of failing
    if not any((path / name).is_file() for name in ("tokenizer.json", "vocab.json")):
        raise SlmModelError(f"{path}: no tokenizer files (tokenizer.json or vocab.json + merges.txt)")
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = GPT2LMHeadModel.from_pretrained(path)
    except (OSError, ValueError, SafetensorError) as e:  # missing or corrupt weights / tokenizer files
        raise SlmModelError(f"{path}: cannot load the model folder ({first_line(e)})") from e
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = model.to(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    model.eval()
    return tokenizer, model


def generate_responses(model, tokenizer, examples: Sequence[dict], batch_size: int = 8, **decoding) -> list[str]:
    """Answers for Alpaca rows (``instruction`` and optional ``input``), in order.

    Prompts are left-padded so every row's answer starts right after its own prompt.
    """
    kwargs = decoding_kwargs(**decoding)
    prompts = [format_alpaca_prompt(e["instruction"], e.get("input", "")) for e in examples]
    tokenizer.padding_side = "left"
    answers = []
    model.eval()
    for start in range(0, len(prompts), batch_size):
        batch = tokenizer(prompts[start:start + batch_size], return_tensors="pt", padding=True,
                          add_special_tokens=False).to(model.device)
        with torch.no_grad():
            output = model.generate(**batch, pad_token_id=tokenizer.eos_token_id,
                                    eos_token_id=tokenizer.eos_token_id, **kwargs)
        new_tokens = output[:, batch["input_ids"].shape[1]:]
        answers.extend(text.strip() for text in tokenizer.batch_decode(new_tokens, skip_special_tokens=True))
    return answers


def respond(model, tokenizer, instruction: str, input_text: str = "", **decoding) -> str:
    """One answer to one instruction (e.g. an ASR transcript), decoded with ``decoding_kwargs(**decoding)``."""
    return generate_responses(model, tokenizer, [{"instruction": instruction, "input": input_text}],
                              batch_size=1, **decoding)[0]


@cli
def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model_dir", help="folder written by slm/finetune.py")
    parser.add_argument("instruction", help="the request; '-' reads one instruction per line from stdin")
    parser.add_argument("--input", default="", help="optional Alpaca input field")
    parser.add_argument("--strategy", choices=STRATEGIES, default="greedy")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--num-beams", type=int, default=4, help="beam search width")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--top-k", type=int, default=50, help="sampling: keep the k most likely tokens (0 = off)")
    parser.add_argument("--top-p", type=float, default=1.0, help="sampling: nucleus mass (1.0 = off)")
    parser.add_argument("--repetition-penalty", type=float, default=1.0, help=">1 discourages repeats")
    parser.add_argument("--seed", type=int, default=0, help="for sampling")
    args = parser.parse_args(argv)

    try:
        decoding = decoding_from_args(args)
    except ValueError as e:
        raise DuetError(str(e)) from e
    tokenizer, model = load_model(args.model_dir)
    torch.manual_seed(args.seed)
    instructions = [line.strip() for line in sys.stdin if line.strip()] if args.instruction == "-" else [args.instruction]
    for instruction in instructions:
        answer = respond(model, tokenizer, instruction, args.input, **decoding)
        print(answer if len(instructions) == 1 else f"{instruction}\t{answer}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
