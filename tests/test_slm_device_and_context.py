"""The SLM on a GPU box: ablate.py picks the device like the fine-tune (issue 19 item 12), and generation keeps
prompt + answer inside the model's context instead of indexing past it (item 16)."""

import logging

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from slm import ablate, evaluation, generation
from slm.data import PREAMBLE, RESPONSE_HEADER
from slm.generation import ContextLengthError, GenerationSettings, new_tokens_that_fit
from slm.modeling import train_bpe_tokenizer


class Stop(Exception):
    """Raised by the fake loader once it has seen the device."""


@pytest.mark.parametrize("cuda, argv, expected", [(True, [], "cuda"), (False, [], "cpu"),
                                                  (True, ["--device", "cpu"], "cpu")])
def test_ablate_uses_the_gpu_when_there_is_one(monkeypatch, tmp_path, cuda, argv, expected):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    seen = []

    def fake_load_model(path, device=None):
        seen.append(device)
        raise Stop

    monkeypatch.setattr(evaluation, "load_model", fake_load_model)  # ablate's loader
    with pytest.raises(Stop):
        ablate.main([str(tmp_path), *argv])
    assert seen == [expected]


def test_ablate_refuses_cuda_without_cuda(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert ablate.main([str(tmp_path), "--device", "cuda"]) == 2
    assert capsys.readouterr().err.strip() == "ablate: error: --device cuda: CUDA is not available on this machine"
    with pytest.raises(generation.SlmDeviceError, match="'gpu' is not a device"):
        generation.pick_device("gpu")


@pytest.mark.parametrize("prompt, requested, fits", [(10, 8, 8), (10, 22, 22), (10, 40, 22), (31, 64, 1)])
def test_new_tokens_are_capped_to_the_context(prompt, requested, fits):
    assert new_tokens_that_fit(prompt, requested, context=32) == fits
    assert new_tokens_that_fit(prompt, requested, context=None) == requested


@pytest.mark.parametrize("prompt", [32, 40])
def test_a_prompt_that_fills_the_context_is_refused_with_both_numbers(prompt):
    with pytest.raises(ContextLengthError, match=f"the prompt is {prompt} tokens and the model's context is 32"):
        new_tokens_that_fit(prompt, 4, context=32)


@pytest.fixture(scope="module")
def tiny_gpt2():
    """GPT-2 with a 32-position context, random weights, a byte-level BPE tokenizer trained on a few lines. The
    Alpaca template alone is 30-odd BPE tokens, so its two fixed parts are one added token each."""
    tokenizer = train_bpe_tokenizer(["set a timer for ten minutes", "play some jazz please", "what time is it"] * 20,
                                    vocab_size=300)
    tokenizer.add_tokens([f"{PREAMBLE}\n\n### Instruction:\n", RESPONSE_HEADER])
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), n_positions=32, n_embd=16, n_layer=1, n_head=2,
                                       bos_token_id=tokenizer.eos_token_id, eos_token_id=tokenizer.eos_token_id))
    return tokenizer, model.eval()


def test_generation_fits_the_context_and_says_so_once(tiny_gpt2, caplog):
    tokenizer, model = tiny_gpt2
    rows = [{"instruction": "play some jazz", "input": ""}, {"instruction": "what time is it", "input": ""}]
    prompt_tokens = len(tokenizer(generation.format_alpaca_prompt("what time is it", ""))["input_ids"])
    assert prompt_tokens < 32, "the test needs a prompt that fits the context"
    with caplog.at_level(logging.WARNING, logger="slm.generation"):
        # greedy on random weights may run to the limit; without the cap the model indexes past position 31
        answers = generation.generate_responses(model, tokenizer, rows, GenerationSettings(max_new_tokens=64,
                                                                                          repetition_penalty=1.0),
                                              batch_size=1)
    assert len(answers) == 2
    capped = [r for r in caplog.records if "answers capped" in r.getMessage()]
    assert len(capped) == 1 and "--max-new-tokens 64" in capped[0].getMessage()


def test_generation_refuses_a_prompt_longer_than_the_context(tiny_gpt2):
    tokenizer, model = tiny_gpt2
    with pytest.raises(ContextLengthError, match="model's context is 32"):
        generation.respond(model, tokenizer, "set a timer for ten minutes " * 6, settings=GenerationSettings())
