"""Alpaca data: the prompt template, loading and splitting, tokenisation and the padding collator.

Template: the seed report's variant of the Alpaca prompt (the one in Raschka's *Build a Large
Language Model From Scratch*, chapter 7) -- the same one-sentence preamble for every example and an
``### Input:`` block only when the input is non-empty. Stanford's original uses a longer preamble
when there is an input; we do not.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import torch
from omegaconf import OmegaConf

from duet.foundation import python_command
from duet.foundation.token_rows import pad_token_rows
from slm.config import ConfigError, resolve_path

PREAMBLE = ("Below is an instruction that describes a task. "
            "Write a response that appropriately completes the request.")
RESPONSE_HEADER = "\n\n### Response:\n"
REQUIRED_KEYS = ("instruction", "input", "output")


def format_alpaca_prompt(instruction: str, input_text: str = "") -> str:
    """Everything the model sees before the answer, ending with the response header."""
    prompt = f"{PREAMBLE}\n\n### Instruction:\n{instruction}"
    if input_text:
        prompt += f"\n\n### Input:\n{input_text}"
    return prompt + RESPONSE_HEADER


def format_alpaca_example(example: dict) -> str:
    """Prompt and answer as one training text (without the end-of-text token)."""
    return format_alpaca_prompt(example["instruction"], example.get("input", "")) + example["output"]


def validate_examples(examples: list, source: str) -> list[dict]:
    """Check the Alpaca schema; the error names the source and the first bad row."""
    if not isinstance(examples, list) or not examples:
        raise ValueError(f"{source}: expected a non-empty JSON list of {{instruction, input, output}} objects")
    for index, example in enumerate(examples):
        if not isinstance(example, dict):
            raise ValueError(f"{source}: row {index} is not an object")
        for key in REQUIRED_KEYS:
            if not isinstance(example.get(key), str):
                raise ValueError(f"{source}: row {index} lacks the string field '{key}'")
    return [{key: example[key] for key in REQUIRED_KEYS} for example in examples]


def load_alpaca(source: str) -> list[dict]:
    """Rows from a local Alpaca JSON list (e.g. ``alpaca_data.json``) or a hub dataset name.

    A hub name goes through ``datasets.load_dataset``; when the hub is unreachable that raises, and
    the caller (``finetune.py``) turns it into a one-line hint at the offline preset.
    """
    path = Path(source).expanduser()
    if path.suffix in (".json", ".jsonl") or path.exists():
        if not path.is_file():
            raise FileNotFoundError(f"data file not found: {path}")
        text = path.read_text(encoding="utf-8")
        try:
            rows = json.loads(text) if path.suffix != ".jsonl" else [json.loads(line) for line in text.splitlines() if line.strip()]
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: not valid JSON ({e.msg}, line {e.lineno})") from None
        return validate_examples(rows, str(path))
    # datasets takes ~3 s to import: only the calls that use it pay for it
    import datasets

    rows = datasets.load_dataset(source, split="train").to_list()
    return validate_examples(rows, source)


def split_examples(examples: Sequence[dict], fractions: Sequence[float], seed: int) -> dict[str, list[dict]]:
    """Shuffle with a fixed seed and cut into train / test / validation (the report's 85 / 10 / 5).

    Test and validation get ``int(n * fraction)`` rows; train gets the rest, so no row is lost.
    """
    if len(fractions) != 3 or any(f < 0 for f in fractions) or abs(sum(fractions) - 1.0) > 1e-6:
        raise ValueError(f"data.split must be three non-negative fractions summing to 1, got {list(fractions)}")
    order = list(range(len(examples)))
    random.Random(seed).shuffle(order)
    n_test, n_val = int(len(order) * fractions[1]), int(len(order) * fractions[2])
    n_train = len(order) - n_test - n_val
    if n_train <= 0 or n_val <= 0:
        raise ValueError(f"{len(order)} examples are too few for the split {list(fractions)}")
    pick = lambda idx: [examples[i] for i in idx]  # noqa: E731
    return {"train": pick(order[:n_train]), "test": pick(order[n_train:n_train + n_test]),
            "validation": pick(order[n_train + n_test:])}


def tokenize_example(example: dict, tokenizer, max_length: int) -> dict:
    """Token ids of prompt + answer + one end-of-text token, truncated to ``max_length``.

    Prompt and answer are encoded separately so that ``prompt_length`` is an exact token boundary
    for prompt masking; the prompt ends in a newline, where GPT-2's pre-tokeniser splits anyway.
    The prompt gets whatever the tokenizer puts before a text (nothing for GPT-2's and the scratch preset's;
    the converted Whisper GPT-2's stand-in for Whisper's prefix), the answer nothing.
    Truncation cuts from the end, so an over-long answer loses its end-of-text token.
    """
    prompt_ids = tokenizer.encode(format_alpaca_prompt(example["instruction"], example["input"]))
    answer_ids = tokenizer.encode(example["output"], add_special_tokens=False)
    input_ids = (prompt_ids + answer_ids + [tokenizer.eos_token_id])[:max_length]
    return {"input_ids": input_ids, "prompt_length": min(len(prompt_ids), len(input_ids))}


def tokenize_text(text: str, tokenizer, max_length: int) -> dict:
    """A plain sentence as a training row (replay of general English): what the tokenizer puts before a text
    (the converted Whisper GPT-2's stand-in for Whisper's prefix; nothing for GPT-2's) is its "prompt", never a
    target; every token of the sentence and the end-of-text token after it are."""
    prefix = len(tokenizer.encode(""))
    input_ids = (tokenizer.encode(text) + [tokenizer.eos_token_id])[:max_length]
    return {"input_ids": input_ids, "prompt_length": min(prefix, len(input_ids))}


def replay_sentences(path: Path, per_row: float, rows: int, seed: int) -> list[str]:
    """``round(per_row * rows)`` distinct non-empty lines of ``path``, drawn with ``seed``; a ``ConfigError``
    naming ``data.replay_text`` when the file is missing or holds too few lines."""
    if not path.is_file():
        raise ConfigError(f"data.replay_text: {path} does not exist "
                          f"({python_command('tools/make_english_text.py', '--out', str(path))} writes one)")
    lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    wanted = round(per_row * rows)
    if wanted > len(lines):
        raise ConfigError(f"data.replay_text: {path} has {len(lines)} sentences, data.replay_per_row="
                              f"{per_row:g} x {rows} training rows wants {wanted}")
    return random.Random(seed).sample(lines, wanted)


@dataclass
class AlpacaCollator:
    """Pad a batch with the EOS id (GPT-2 has no pad token) and build the labels.

    Labels equal the inputs (the model shifts them itself) except: padding positions are -100, but
    the first EOS of every row stays a target so the model learns to stop; with ``mask_prompt`` the
    prompt tokens are -100 too, so the loss covers only the answer and its EOS.
    """

    pad_token_id: int
    mask_prompt: bool = False

    def __call__(self, rows: list[dict]) -> dict[str, torch.Tensor]:
        input_ids, tokens = pad_token_rows([row["input_ids"] for row in rows], self.pad_token_id)
        labels = input_ids.masked_fill(~tokens, -100)
        if self.mask_prompt:
            for i, row in enumerate(rows):
                labels[i, : row["prompt_length"]] = -100
        return {"input_ids": input_ids, "attention_mask": tokens.long(), "labels": labels}


def load_splits_for(model_dir: Path):
    """The data splits the model was trained with, from its saved finetune_config.yaml."""
    config_file = model_dir / "finetune_config.yaml"
    if not config_file.is_file():
        raise FileNotFoundError(f"{config_file} missing: give a folder written by slm/finetune.py")
    cfg = OmegaConf.load(config_file)
    source = resolve_path(cfg.data.source)
    rows = load_alpaca(str(source) if source.exists() else cfg.data.source)
    if cfg.data.max_examples:
        rows = rows[: cfg.data.max_examples]
    return cfg, split_examples(rows, list(cfg.data.split), cfg.data.split_seed)
