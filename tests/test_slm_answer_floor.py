"""An answer the language model was unsure of is withheld: the probability of its least likely token, what replaces
it, and where the floor comes from (the settings, else the model folder's finetune_config.yaml)."""

import shutil

import pytest
import torch

from slm.data import format_alpaca_prompt
from slm.generation import (GenerationSettings, SlmModelError, generate_answers, generate_model_texts,
                            generate_scored_texts, load_model)
from slm.tool_calls import UNKNOWN_ANSWER, unsure_answer
from tests.script_helpers import load_script

GREEDY = GenerationSettings(strategy="greedy", max_new_tokens=12, repetition_penalty=1.0)
ROWS = [{"instruction": "Could you share my location with Anna for me?"},
        {"instruction": "what is the capital of peru"}]


@pytest.mark.parametrize("request_text, shown", [
    ("Could you share my location with Anna for me?", "Sorry, I can't share your location with Anna."),
    ("call grandma", "Sorry, I can't call grandma."),
    ("what is the capital of peru", UNKNOWN_ANSWER),  # a question is not an action to decline
    ("will it rain tomorrow", UNKNOWN_ANSWER),
    ("please", UNKNOWN_ANSWER),  # nothing left to repeat
])
def test_an_unsure_answer_is_replaced_by_a_decline_or_i_dont_know(request_text, shown):
    replaced = unsure_answer(request_text, "Calling Chloe.")
    assert (replaced.text, replaced.withheld, replaced.calls) == (shown, "Calling Chloe.", ())


def test_an_unsure_answer_that_already_says_the_same_is_shown_not_withheld():
    """A model unsure of its own right decline ("Sorry, I can't make you a cup of coffee." at p = 0.29) is not shown
    as withheld beside the same words."""
    same = unsure_answer("make me a cup of coffee", "Sorry, I can't make you a cup of coffee.")
    assert (same.text, same.withheld) == ("Sorry, I can't make you a cup of coffee.", None)


def test_the_least_token_probability_is_the_one_generation_saw(tiny_slm_folder):
    """Teacher-forced in one pass over left-padded prompts of different lengths, it equals the probability greedy
    decoding gave each token it chose (transformers' own scores, one prompt at a time)."""
    tokenizer, model = load_model(tiny_slm_folder, device="cpu")
    scored = generate_scored_texts(model, tokenizer, ROWS, GREEDY, batch_size=2)
    assert [s.text for s in scored] == generate_model_texts(model, tokenizer, ROWS, GREEDY, batch_size=1)
    for row, got in zip(ROWS, scored):
        batch = tokenizer(format_alpaca_prompt(row["instruction"]), return_tensors="pt")
        with torch.no_grad():
            out = model.generate(**batch, max_new_tokens=12, do_sample=False, output_scores=True,
                                 return_dict_in_generate=True, pad_token_id=tokenizer.eos_token_id,
                                 eos_token_id=tokenizer.eos_token_id, repetition_penalty=1.0)
        chosen = out.sequences[0, batch["input_ids"].shape[1]:]
        probs = [torch.softmax(step[0], -1)[token].item() for step, token in zip(out.scores, chosen)
                 if token != tokenizer.eos_token_id]
        assert probs and got.least_token_prob == pytest.approx(min(probs), abs=1e-5)
        assert 0 < got.least_token_prob < 1  # an untrained model is unsure of something


def test_answers_below_the_floor_are_withheld_and_the_others_shown(tiny_slm_folder):
    tokenizer, model = load_model(tiny_slm_folder, device="cpu")
    plain = generate_answers(model, tokenizer, ROWS, GREEDY)  # the folder sets no floor: off
    assert all(a.withheld is None for a in plain)
    least = [s.least_token_prob for s in generate_scored_texts(model, tokenizer, ROWS, GREEDY)]
    below = generate_answers(model, tokenizer, ROWS, GenerationSettings(**{**GREEDY.__dict__,
                                                                           "min_token_prob": max(least) + 1e-6}))
    assert [a.text for a in below] == ["Sorry, I can't share your location with Anna.", UNKNOWN_ANSWER]
    assert [a.withheld for a in below] == [a.text for a in plain]
    above = generate_answers(model, tokenizer, ROWS, GenerationSettings(**{**GREEDY.__dict__,
                                                                           "min_token_prob": min(least) / 2}))
    assert above == plain


def test_the_floor_comes_from_the_model_folder_unless_the_settings_give_one(tiny_slm_folder, tmp_path):
    folder = tmp_path / "model"
    shutil.copytree(tiny_slm_folder, folder)
    (folder / "finetune_config.yaml").write_text("seed: 1\nanswer:\n  min_token_prob: 1.0\n")
    tokenizer, model = load_model(folder, device="cpu")
    assert model.min_token_prob == 1.0
    assert all(a.withheld is not None for a in generate_answers(model, tokenizer, ROWS, GREEDY))
    off = GenerationSettings(**{**GREEDY.__dict__, "min_token_prob": 0.0})
    assert all(a.withheld is None for a in generate_answers(model, tokenizer, ROWS, off))
    (folder / "finetune_config.yaml").write_text("seed: 1\n")  # a preset from before the key: off
    assert load_model(folder, device="cpu")[1].min_token_prob == 0.0


@pytest.mark.parametrize("text", ["answer:\n  min_token_prob: 2\n", "answer:\n  min_token_prob: often\n",
                                  "answer: [unclosed\n"])
def test_a_bad_floor_in_the_folder_is_named(tiny_slm_folder, tmp_path, text):
    folder = tmp_path / "model"
    shutil.copytree(tiny_slm_folder, folder)
    (folder / "finetune_config.yaml").write_text(text)
    with pytest.raises(SlmModelError, match="finetune_config.yaml"):
        load_model(folder, device="cpu")


def test_the_bench_chooses_the_floor_that_withholds_most_wrong_beyond_right_lost(repo_root):
    bench = load_script(repo_root / "bench" / "slm_answer_floor.py", "bench_slm_answer_floor")
    requests = [{"set": "s", "instruction": "call a taxi", "keywords": [["taxi"]], "kind": "action",
                 "expect": "decline"},
                {"set": "s", "instruction": "turn on the fan", "reference": "Turning the fan on."},  # a generator row
                {"set": "s", "instruction": "what is the capital of peru", "keywords": [["lima"]], "kind": "knowledge"},
                {"set": "s", "instruction": "dim the bedroom lamp", "keywords": [["lamp"]], "kind": "action",
                 "expect": "do"}]
    answers = {"m": [{"text": "Calling a spider.", "least": 0.02},  # wrong, unsure: its decline names the taxi
                     {"text": "Turning the fan on.", "least": 0.3},  # right, less sure
                     {"text": "The capital of Peru is Quito.", "least": 0.2},  # invented: "I don't know that."
                     {"text": "Setting the bedroom lamp to 50 percent.", "least": 0.4}]}  # right; a decline is wrong
    floors = [0.0, 0.01, 0.1, 0.25, 0.5]
    table = {row["floor"]: row for row in bench.floor_table(requests, answers, floors, right_cost=1)}
    assert [table[f]["right"] for f in floors] == [2, 2, 3, 3, 1]
    assert [table[f]["gain"] for f in floors] == [0, 0, 1, 2, 0]  # at 0.5: 2 wrong withheld, 2 right lost
    assert bench.choose_floor(list(table.values()))["floor"] == 0.25
    weighed = bench.floor_table(requests, answers, floors)  # a right answer lost weighs two wrong ones withheld
    assert [row["gain"] for row in weighed] == [0, 0, 1, 2, -2]
    # a floor that only loses right answers is never chosen over off, and a tie goes to the lower floor
    assert bench.choose_floor([table[0.0], table[0.5]])["floor"] == 0.0
    assert bench.choose_floor([{**table[0.25], "floor": 0.3}, table[0.25]])["floor"] == 0.25
    summary = bench.held_out_summary(requests, answers["m"], 0.25)
    assert (summary["right"], summary["actions_on_topic"], summary["invented"]) == (3, 2, 0)
    assert bench.held_out_summary(requests, answers["m"], 0.0)["invented"] == 1


def test_least_token_probs_stop_at_the_first_eos_and_ignore_left_padding(tiny_slm_folder):
    """Against each row scored alone, unpadded: a row whose answer ends early (EOS, then padding) counts its tokens
    before the EOS only; an empty answer counts as sure (1.0)."""
    from slm.generation import _least_token_probs

    tokenizer, model = load_model(tiny_slm_folder, device="cpu")
    eos = tokenizer.eos_token_id
    prompts = [[5, 6, 7, 8], [9, 10]]  # the second left-padded by two
    answers = [[11, 12, eos, eos, eos], [13, 14, 15, 16, 17], [eos, eos, eos, eos, eos]]
    prompts.append([18, 19, 20])
    width = max(map(len, prompts))
    output = torch.tensor([[eos] * (width - len(p)) + p + a for p, a in zip(prompts, answers)])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    least = _least_token_probs(model, mask, output, width, eos)
    for prompt, answer, got in zip(prompts, answers, least):
        kept = answer[:answer.index(eos)] if eos in answer else answer
        if not kept:
            assert got == 1.0
            continue
        with torch.no_grad():
            logits = model(torch.tensor([prompt + kept])).logits[0]
        probs = torch.softmax(logits[len(prompt) - 1:-1], -1).gather(-1, torch.tensor(kept).unsqueeze(-1))
        assert got == pytest.approx(float(probs.min()), rel=1e-4)


@pytest.mark.parametrize("value", ["2", "-0.1", "null"])
def test_a_bad_floor_in_a_preset_is_refused_before_training(value):
    from slm.config import ConfigError, load_config

    with pytest.raises(ConfigError, match=r"answer.min_token_prob must be in \[0, 1\]"):
        load_config("slm_whisper_demo", [f"answer.min_token_prob={value}"])
    assert load_config("slm_whisper_demo").answer.min_token_prob == 0.3


def test_sampled_answers_use_no_folder_floor_but_an_explicit_one(tiny_slm_folder):
    from slm.generation import answer_floor

    _, model = load_model(tiny_slm_folder, device="cpu")
    model.min_token_prob = 0.3
    assert answer_floor(model, GenerationSettings()) == 0.3  # greedy: the folder's
    assert answer_floor(model, GenerationSettings(strategy="beam")) == 0.3
    assert answer_floor(model, GenerationSettings(strategy="sample")) == 0.0  # measured on greedy answers
    assert answer_floor(model, GenerationSettings(strategy="sample", min_token_prob=0.1)) == 0.1


def test_beam_search_answers_are_scored_by_the_teacher_forced_pass(tiny_slm_folder):
    """Greedy answers take the probabilities from generation's own logits; beam search's from one more pass: both
    agree on the same answer (beam search of width 2 on this model writes the greedy answer or another one, each
    scored where it stands)."""
    tokenizer, model = load_model(tiny_slm_folder, device="cpu")
    greedy = generate_scored_texts(model, tokenizer, ROWS, GREEDY, batch_size=2)
    beam = generate_scored_texts(model, tokenizer, ROWS, GenerationSettings(**{**GREEDY.__dict__, "strategy": "beam",
                                                                               "num_beams": 2}), batch_size=2)
    sampled = generate_scored_texts(model, tokenizer, ROWS, GenerationSettings(**{**GREEDY.__dict__,
                                                                                  "strategy": "sample"}))
    assert all(0 < s.least_token_prob < 1 for s in (*beam, *sampled))
    same = [(g, b) for g, b in zip(greedy, beam) if g.text == b.text]
    assert same  # the first row's beam answer is the greedy one here
    assert all(b.least_token_prob == pytest.approx(g.least_token_prob, rel=1e-4) for g, b in same)


def test_an_unsure_answer_already_saying_its_replacement_keeps_its_calls(tiny_slm_folder, monkeypatch):
    import slm.generation as generation

    tokenizer, model = load_model(tiny_slm_folder, device="cpu")
    monkeypatch.setattr(generation, "generate_scored_texts", lambda *a, **k: [
        generation.ScoredText("Sorry, I can't <<request>>.", 0.01), generation.ScoredText("Calling Chloe.", 0.01)])
    declined, guessed = generate_answers(model, tokenizer, [{"instruction": "make me a cup of coffee"},
                                                            {"instruction": "call grandma"}],
                                         GenerationSettings(**{**GREEDY.__dict__, "min_token_prob": 0.3}))
    assert declined.text == "Sorry, I can't make you a cup of coffee." and declined.withheld is None
    assert [call.tool for call in declined.calls] == ["request"]
    assert (guessed.text, guessed.withheld) == ("Sorry, I can't call grandma.", "Calling Chloe.")


def test_the_bench_counts_a_wrong_answer_withheld_only_when_the_user_reads_another(repo_root):
    bench = load_script(repo_root / "bench" / "slm_answer_floor.py", "bench_slm_answer_floor_same")
    request = {"set": "s", "instruction": "set a timer for ten minutes", "keywords": [["timer"]], "kind": "action",
               "expect": "do"}
    answers = {"m": [{"text": "Sorry, I can't set a timer for ten minutes.", "least": 0.1}]}  # wrong, and unchanged
    (row,) = bench.floor_table([request], answers, [0.3])
    assert (row["right"], row["right_lost"], row["wrong_withheld"], row["gain"]) == (0, 0, 0, 0)
