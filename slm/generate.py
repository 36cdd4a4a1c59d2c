"""Answer instructions with a fine-tuned GPT-2 folder: greedy, beam search or sampling, with the KV cache.

Usage:
    python slm/generate.py experiments/slm_tiny "set a timer for ten minutes"
    python slm/generate.py experiments/slm_tiny "Sort the numbers in ascending order." --input "5, 2, 9"
    python slm/generate.py experiments/slm_tiny "play some jazz" --strategy sample --temperature 0.7 --top-k 40 --top-p 0.9
    python slm/generate.py experiments/slm_tiny "what is seven plus five" --strategy beam --num-beams 4
    echo "turn off the kitchen lights" | python slm/generate.py experiments/slm_tiny -      # one instruction per line

The decoding flags and their defaults are the voice pipeline's (``slm.generation.GenerationSettings``).
Library use (the voice pipeline): ``tokenizer, model = load_model(path)`` then
``respond(model, tokenizer, "set a timer", GenerationSettings(strategy="beam"))``.
Decoding is ``transformers``' ``generate`` with ``use_cache=True``; it stops at the EOS token.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Sequence

import torch
from safetensors import SafetensorError

from duet.foundation.errors import cli, first_line
from slm.data import format_alpaca_prompt
from slm.errors import SlmError
from slm.generation import (GenerationSettings, add_generation_arguments, generation_settings_from_args,
                            new_tokens_that_fit)

log = logging.getLogger(__name__)


class SlmModelError(SlmError, ValueError):
    """A language-model folder that cannot be loaded (missing or corrupt files), named in the message."""


class SlmDeviceError(SlmError, ValueError):
    """A ``--device`` that names no usable device."""


def pick_device(requested: str = "auto") -> str:
    """``auto``: the GPU when CUDA is available (as the fine-tune does), else the CPU; anything else is used as
    given (``cpu``, ``cuda``, ``cuda:1``), after checking that it exists."""
    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(requested)
    except RuntimeError:
        raise SlmDeviceError(f"--device {requested!r} is not a device; use auto, cpu, cuda or cuda:N") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise SlmDeviceError(f"--device {requested}: CUDA is not available on this machine")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise SlmDeviceError(f"--device {requested}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return requested


def load_model(path: str | Path, device: str | None = None):
    """Tokenizer and model from a folder written by ``slm/finetune.py`` (or any GPT-2 HF folder).

    A folder that is not one, or whose files are missing or corrupt, is an ``SlmModelError`` naming it.
    """
    # transformers takes ~2.6 s to import: only the calls that use it pay for it
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
    model = model.to(pick_device(device or "auto"))
    model.eval()
    return tokenizer, model


def generate_responses(model, tokenizer, examples: Sequence[dict], settings: GenerationSettings = GenerationSettings(),
                       batch_size: int = 8) -> list[str]:
    """Answers for Alpaca rows (``instruction`` and optional ``input``), in order, decoded with ``settings``.

    Prompts are left-padded so every row's answer starts right after its own prompt.
    """
    kwargs = settings.generate_kwargs()
    prompts = [format_alpaca_prompt(e["instruction"], e.get("input", "")) for e in examples]
    tokenizer.padding_side = "left"
    context = getattr(model.config, "n_positions", None)
    answers, capped = [], False
    model.eval()
    for start in range(0, len(prompts), batch_size):
        batch = tokenizer(prompts[start:start + batch_size], return_tensors="pt", padding=True,
                          add_special_tokens=False).to(model.device)
        prompt_tokens = batch["input_ids"].shape[1]  # left padding counts: the answer starts after it
        fitting = new_tokens_that_fit(prompt_tokens, settings.max_new_tokens, context)
        if fitting < settings.max_new_tokens and not capped:
            log.warning("answers capped at %d new tokens (not --max-new-tokens %d): a %d-token prompt and the "
                        "model's %d-token context", fitting, settings.max_new_tokens, prompt_tokens, context)
            capped = True
        with torch.no_grad():
            output = model.generate(**batch, pad_token_id=tokenizer.eos_token_id,
                                    eos_token_id=tokenizer.eos_token_id, **{**kwargs, "max_new_tokens": fitting})
        new_tokens = output[:, batch["input_ids"].shape[1]:]
        answers.extend(text.strip() for text in tokenizer.batch_decode(new_tokens, skip_special_tokens=True))
    return answers


def respond(model, tokenizer, instruction: str, input_text: str = "",
            settings: GenerationSettings = GenerationSettings()) -> str:
    """One answer to one instruction (e.g. an ASR transcript), decoded with ``settings``."""
    return generate_responses(model, tokenizer, [{"instruction": instruction, "input": input_text}], settings,
                              batch_size=1)[0]


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model_dir", help="folder written by slm/finetune.py")
    parser.add_argument("instruction", help="the request; '-' reads one instruction per line from stdin")
    parser.add_argument("--input", default="", help="optional Alpaca input field")
    parser.add_argument("--seed", type=int, default=0, help="for sampling")
    add_generation_arguments(parser)
    return parser


@cli
def main(argv: Sequence[str] | None = None) -> int:
    args = get_parser().parse_args(argv)
    settings = generation_settings_from_args(args)
    tokenizer, model = load_model(args.model_dir)
    torch.manual_seed(args.seed)
    instructions = [line.strip() for line in sys.stdin if line.strip()] if args.instruction == "-" else [args.instruction]
    for instruction in instructions:
        answer = respond(model, tokenizer, instruction, args.input, settings)
        print(answer if len(instructions) == 1 else f"{instruction}\t{answer}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
