"""Models and tokenizers: a pretrained GPT-2 (hub name or local folder) or a tiny one built from scratch.

The offline preset has no pretrained weights to start from, so it trains a byte-level BPE tokenizer
on the training texts (``tokenizers``, the same algorithm GPT-2's tokenizer uses) and initialises a
small ``GPT2LMHeadModel`` from a ``GPT2Config``. Both paths give the same classes, so training,
generation, evaluation and ablation code never branch on where the model came from.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast, Trainer

from duet.foundation.errors import first_line
from slm.errors import SlmError

EOS_TOKEN = "<|endoftext|>"


class HubUnreachable(SlmError, RuntimeError):
    """A hub name was asked for but neither the network nor the local cache could provide it."""


def train_bpe_tokenizer(texts: Iterable[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """Byte-level BPE with GPT-2's pre-tokeniser and ``<|endoftext|>`` as its only special token."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS_TOKEN], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token=EOS_TOKEN, bos_token=EOS_TOKEN,
                                   unk_token=EOS_TOKEN, pad_token=EOS_TOKEN)


def build_scratch_model(tokenizer, n_layer: int, n_embd: int, n_head: int, n_positions: int,
                        dropout: float, seed: int) -> GPT2LMHeadModel:
    """A randomly initialised GPT-2-architecture model sized for ``tokenizer``."""
    config = GPT2Config(vocab_size=len(tokenizer), n_positions=n_positions, n_embd=n_embd, n_layer=n_layer,
                        n_head=n_head, resid_pdrop=dropout, embd_pdrop=dropout, attn_pdrop=dropout,
                        bos_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id,
                        pad_token_id=tokenizer.eos_token_id)
    torch.manual_seed(seed)
    return GPT2LMHeadModel(config)


def load_pretrained(name_or_path: str, dropout: float | None = None):
    """Tokenizer and ``GPT2LMHeadModel`` from a hub name or a local HF folder.

    Raises ``HubUnreachable`` when the name is not a folder and the hub (or cache) cannot serve it.
    """
    overrides = {} if dropout is None else {"resid_pdrop": dropout, "embd_pdrop": dropout, "attn_pdrop": dropout}
    try:
        tokenizer = load_tokenizer(name_or_path)
        model = GPT2LMHeadModel.from_pretrained(name_or_path, **overrides)
    except OSError as e:
        raise HubUnreachable(f"cannot load model '{name_or_path}' ({first_line(e, 160)})") from None
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token  # GPT-2 ships without a pad token
    model.generation_config.pad_token_id = tokenizer.eos_token_id
    return tokenizer, model


def load_tokenizer(name_or_path: str | Path):
    """``AutoTokenizer.from_pretrained``, digits split again where the saved tokenizer.json splits them: a tokenizer
    whose class is GPT-2's rebuilds GPT-2's own pre-tokenizer on loading and would drop :func:`split_digits`."""
    tokenizer = AutoTokenizer.from_pretrained(name_or_path)
    saved = Path(name_or_path) / "tokenizer.json"
    if saved.is_file() and _splits_digits(Tokenizer.from_file(str(saved)).pre_tokenizer):
        split_digits(tokenizer)
    return tokenizer


def _splits_digits(pre_tokenizer) -> bool:
    return "Digits" in repr(pre_tokenizer)


def split_digits(tokenizer) -> None:
    """Make ``tokenizer`` write every digit as a token of its own ("623" -> "6", "2", "3"): the tokenizers library's
    ``Digits`` pre-tokenizer after the tokenizer's own, as LLaMA's tokenizer splits numbers. GPT-2's merges write a
    number in chunks of up to three digits ("623" -> " 6" + "23"), and a model this small copies a chunk it met rarely
    as a more frequent one ("23" -> "73"); digit by digit it copies ten symbols it meets constantly. Saved with the
    tokenizer (tokenizer.json), so generation splits as training did; a tokenizer that splits digits already is
    left as it is."""
    backend = tokenizer.backend_tokenizer
    if _splits_digits(backend.pre_tokenizer):
        return
    backend.pre_tokenizer = pre_tokenizers.Sequence([backend.pre_tokenizer,
                                                     pre_tokenizers.Digits(individual_digits=True)])


def count_parameters(model: torch.nn.Module) -> int:
    """Distinct parameters (GPT-2 ties the LM head to the token embedding; count it once)."""
    return sum(p.numel() for p in model.parameters())


PRECISIONS = ("auto", "bf16", "fp16", "fp32")


def training_precision(requested: str, cuda_capability: tuple[int, int] | None) -> str:
    """``bf16``, ``fp16`` or ``fp32`` for ``train.precision`` on a GPU of this compute capability (None: CPU).

    ``auto``: bf16 only where the GPU runs it natively (capability 8.0 and later: A100, L4, H100); V100 and
    T4 only emulate bf16, far slower than their fp16, so they train in fp16 mixed precision (with the
    Trainer's loss scaling); fp32 on the CPU (bf16 autocast was slower on our CPUs).
    ``torch.cuda.is_bf16_supported()`` counts emulation, so it cannot decide this.
    """
    if requested not in PRECISIONS:
        raise ValueError(f"train.precision must be one of {', '.join(PRECISIONS)}, got '{requested}'")
    if requested == "fp16" and cuda_capability is None:
        raise ValueError("train.precision=fp16 needs a GPU (use fp32 or bf16 on the CPU)")
    if requested != "auto":
        return requested
    if cuda_capability is None:
        return "fp32"
    return "bf16" if tuple(cuda_capability) >= (8, 0) else "fp16"


def precision_arguments(precision: str) -> dict[str, bool]:
    """The ``TrainingArguments`` flags for a :func:`training_precision` result."""
    return {"bf16": precision == "bf16", "fp16": precision == "fp16"}


def pick_device_and_training_precision(requested: str) -> tuple[str, str]:
    """This process's device and its :func:`training_precision`.

    Under torchrun / accelerate each process takes the GPU of its ``LOCAL_RANK``, so the evaluations
    around training do not all land on GPU 0.
    """
    if not torch.cuda.is_available():
        return "cpu", training_precision(requested, None)
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    return f"cuda:{local_rank}", training_precision(requested, torch.cuda.get_device_capability(local_rank))


def answer_token_loss(model, batch: dict[str, torch.Tensor], num_items_in_batch=None) -> torch.Tensor:
    """The causal-LM loss of ``model(**batch)``, with the output layer applied only where a label is scored.

    GPT-2's output layer is most of a small model's step when the vocabulary is large (Whisper tiny.en's decoder:
    50,257 x 384 against 4 blocks of 384), and with ``mask_prompt`` most positions are prompt, whose logits the
    loss never reads. Passing the positions to keep (``logits_to_keep``, a boolean mask) projects only those;
    the value is the model's own loss (summed cross-entropy over the scored tokens, divided by
    ``num_items_in_batch`` when the Trainer gives it, else their mean), so training follows the same path.
    """
    labels = batch["labels"]
    scored = torch.zeros_like(labels, dtype=torch.bool)
    scored[:, :-1] = labels[:, 1:] != -100  # position t predicts the label at t + 1
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], logits_to_keep=scored).logits
    targets = labels[:, 1:][scored[:, :-1]]
    total = torch.nn.functional.cross_entropy(logits.float(), targets, reduction="sum")
    count = num_items_in_batch if num_items_in_batch is not None else targets.numel()
    if torch.is_tensor(count):
        count = count.to(total.device)
    return total / count


def answer_loss_trainer(**kwargs):
    """A ``transformers.Trainer`` whose training loss is :func:`answer_token_loss` (the same value as the model's
    own loss, 2.7x faster per step for Whisper tiny.en's decoder under ``mask_prompt``: 5.8 s vs 15.7 s forward +
    backward on a batch of 16 at 1 thread). Evaluation keeps the Trainer's own path."""
    class AnswerLossTrainer(Trainer):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            if return_outputs:
                return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
            return answer_token_loss(model, inputs, num_items_in_batch)

    return AnswerLossTrainer(**kwargs)
