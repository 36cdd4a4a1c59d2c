"""Tiny-model behaviour: generation strategies, ablation variants (exact sizes, same function), learning."""

from dataclasses import replace

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from slm.ablation import default_variants, drop_layers, prune_heads, short_finetune, shrink_ffn
from slm.data import format_alpaca_example, tokenize_example
from slm.generation import generate_responses, respond
from slm.generation import GenerationSettings
from slm.modeling import build_scratch_model, count_parameters, train_bpe_tokenizer

ROWS = [{"instruction": f"set a timer for {n} minutes", "input": "", "output": f"OK, timer set for {n} minutes."}
        for n in ("one", "two", "three", "four", "five", "six", "seven", "eight")] + [
        {"instruction": f"play some {g}", "input": "", "output": f"Playing {g}."} for g in ("jazz", "rock", "pop", "blues")]


@pytest.fixture(scope="module")
def tokenizer():
    return train_bpe_tokenizer([format_alpaca_example(r) for r in ROWS], vocab_size=400)


@pytest.fixture()
def model(tokenizer):
    m = build_scratch_model(tokenizer, n_layer=3, n_embd=32, n_head=4, n_positions=128, dropout=0.0, seed=0)
    return m.eval()


def gpt2_parameters(vocab, positions, embd, layers, attn_width, inner):
    per_layer = (2 * embd + embd * 3 * attn_width + 3 * attn_width + attn_width * embd + embd
                 + 2 * embd + embd * inner + inner + inner * embd + embd)
    return vocab * embd + positions * embd + layers * per_layer + 2 * embd  # LM head tied to wte


def test_parameter_count_formula_matches_gpt2_124m():
    assert count_parameters(GPT2LMHeadModel(GPT2Config(n_layer=1))) == gpt2_parameters(50257, 1024, 768, 1, 768, 3072)


def test_ablation_variants_have_exact_parameter_counts(model, tokenizer):
    vocab = len(tokenizer)
    assert count_parameters(model) == gpt2_parameters(vocab, 128, 32, 3, 32, 128)
    assert count_parameters(drop_layers(model, [0, 2])) == gpt2_parameters(vocab, 128, 32, 2, 32, 128)
    assert count_parameters(prune_heads(model, 1)) == gpt2_parameters(vocab, 128, 32, 3, 8, 128)
    assert count_parameters(shrink_ffn(model, 48)) == gpt2_parameters(vocab, 128, 32, 3, 32, 48)
    assert count_parameters(model) == gpt2_parameters(vocab, 128, 32, 3, 32, 128)  # original untouched
    assert set(default_variants(model.config)) == {"layers_2of3", "layers_1of3", "heads_2of4", "heads_1of4",
                                                   "ffn_64of128", "ffn_32of128"}


def logits(m, ids):
    with torch.no_grad():
        return m(ids).logits


def test_pruned_heads_equal_zeroed_heads(model):
    ids = torch.randint(0, 300, (2, 10))
    torch.testing.assert_close(logits(prune_heads(model, 4), ids), logits(model, ids))
    pruned = prune_heads(model, 2)
    reference = GPT2LMHeadModel(model.config)
    reference.load_state_dict(model.state_dict())
    d = model.config.n_embd // model.config.n_head
    for block, kept_block in zip(reference.transformer.h, pruned.transformer.h):
        scores = block.attn.c_proj.weight.data.view(4, d, -1).flatten(1).norm(dim=1)
        for head in set(range(4)) - set(scores.topk(2).indices.tolist()):
            block.attn.c_proj.weight.data[head * d:(head + 1) * d] = 0  # a head that writes nothing
    torch.testing.assert_close(logits(pruned, ids), logits(reference, ids), rtol=1e-4, atol=1e-5)


def test_shrunk_ffn_equals_zeroed_neurons(model):
    ids = torch.randint(0, 300, (2, 10))
    torch.testing.assert_close(logits(shrink_ffn(model, 128), ids), logits(model, ids))
    shrunk = shrink_ffn(model, 40)
    reference = GPT2LMHeadModel(model.config)
    reference.load_state_dict(model.state_dict())
    for block in reference.transformer.h:
        mlp = block.mlp
        keep = (mlp.c_fc.weight.data.norm(dim=0) * mlp.c_proj.weight.data.norm(dim=1)).topk(40).indices
        drop = torch.ones(128, dtype=torch.bool)
        drop[keep] = False
        mlp.c_proj.weight.data[drop] = 0
    torch.testing.assert_close(logits(shrunk, ids), logits(reference, ids), rtol=1e-4, atol=1e-5)


def test_dropped_layers_equal_shorter_model(model):
    ids = torch.randint(0, 300, (1, 8))
    torch.testing.assert_close(logits(drop_layers(model, [0, 1, 2]), ids), logits(model, ids))
    with pytest.raises(ValueError, match="distinct indices"):
        drop_layers(model, [0, 3])


def test_every_variant_still_generates(model, tokenizer):
    for name, (make, argument) in default_variants(model.config).items():
        answer_ids = make(model, argument).generate(torch.tensor([[5, 6, 7]]), max_new_tokens=5, do_sample=False,
                                                    min_new_tokens=5, pad_token_id=tokenizer.eos_token_id)
        assert answer_ids.shape == (1, 8), name


def test_shrunk_ffn_saves_and_reloads(model, tmp_path):
    shrink_ffn(model, 48).save_pretrained(tmp_path)
    assert count_parameters(GPT2LMHeadModel.from_pretrained(tmp_path)) == count_parameters(shrink_ffn(model, 48))


def test_training_teaches_answers_and_stopping(model, tokenizer):
    """150 steps on 12 rows: loss falls; greedy answers take the trained form and stop at EOS."""
    rows = [tokenize_example(r, tokenizer, 128) for r in ROWS]
    losses = short_finetune(model, rows, tokenizer.eos_token_id, steps=150, learning_rate=3e-3, batch_size=12,
                            mask_prompt=True, seed=0, log=lambda _: None)
    assert sum(losses[-10:]) / 10 < 0.2 * sum(losses[:10]) / 10
    greedy = GenerationSettings(max_new_tokens=20, repetition_penalty=1.0)
    answers = generate_responses(model, tokenizer, ROWS, greedy, batch_size=12)
    for row, answer in zip(ROWS, answers):
        # the right kind of answer, and it ends where the training answers end (the model learned to stop)
        assert answer.startswith("OK, timer set for" if "timer" in row["instruction"] else "Playing"), answer
        assert answer.endswith(".") and answer.count(".") == 1, answer
    # left-padded batches give the same answers as one prompt at a time
    assert [respond(model, tokenizer, r["instruction"], settings=greedy) for r in ROWS] == answers
    assert respond(model, tokenizer, ROWS[0]["instruction"], settings=replace(greedy, strategy="beam", num_beams=3))
    torch.manual_seed(0)
    sampled = respond(model, tokenizer, ROWS[0]["instruction"],
                      settings=GenerationSettings("sample", temperature=0.8, top_k=5, max_new_tokens=20))
    assert isinstance(sampled, str) and sampled


def test_ablate_entry_point_refinetunes_every_row_and_writes_its_files(tmp_path):
    """slm/ablate.py on a saved tiny model: the baseline gets the same re-fine-tune steps as the variants."""
    import json

    from omegaconf import OmegaConf

    from slm import ablate
    from slm.config import load_config, resolve_path
    from slm.data import load_alpaca, split_examples

    cfg = load_config("slm_tiny_offline", ["data.max_examples=200", "model.scratch.n_embd=32",
                                           "model.scratch.vocab_size=400"])
    rows = load_alpaca(str(resolve_path(cfg.data.source)))[:200]
    train = split_examples(rows, list(cfg.data.split), cfg.data.split_seed)["train"]
    tok = train_bpe_tokenizer([format_alpaca_example(r) for r in train], cfg.model.scratch.vocab_size)
    build_scratch_model(tok, 4, 32, 4, 256, 0.0, 0).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    OmegaConf.save(cfg, tmp_path / "finetune_config.yaml")

    assert ablate.main([str(tmp_path), "--num-generate", "2", "--max-new-tokens", "4", "--refinetune-steps", "2"]) == 0
    results = json.loads((tmp_path / "ablation" / "ablation.json").read_text())
    assert list(results)[0] == "baseline" and len(results) == 7
    assert {r["refinetune_steps"] for r in results.values()} == {2}
    assert all(r["parameters"] < results["baseline"]["parameters"] for name, r in results.items() if name != "baseline")
    assert "re-fine-tuned 2 AdamW steps" in (tmp_path / "ablation" / "ablation.md").read_text()
    assert (tmp_path / "ablation" / "params_vs_metric.png").stat().st_size > 10_000


@pytest.mark.parametrize("mask_prompt", [True, False])
def test_answer_token_loss_equals_the_models_own_loss_and_gradients(model, tokenizer, mask_prompt):
    """The training loss that projects only the scored positions is the model's loss, gradients included."""
    from slm.data import AlpacaCollator
    from slm.modeling import answer_token_loss

    batch = AlpacaCollator(tokenizer.eos_token_id, mask_prompt=mask_prompt)(
        [tokenize_example(row, tokenizer, 128) for row in ROWS[:6]])
    model.train()
    grads = []
    for loss_of in (lambda: model(**batch).loss, lambda: answer_token_loss(model, batch)):
        model.zero_grad()
        loss = loss_of()
        loss.backward()
        grads.append((loss.detach(), [p.grad.clone() for p in model.parameters()]))
    (own, own_grads), (ours, our_grads) = grads
    assert ours == pytest.approx(float(own), rel=1e-5)
    for a, b in zip(own_grads, our_grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)
    n_scored = int((batch["labels"][:, 1:] != -100).sum())
    assert float(answer_token_loss(model, batch, num_items_in_batch=2 * n_scored)) == pytest.approx(float(ours) / 2, rel=1e-5)
