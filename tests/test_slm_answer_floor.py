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
ROWS = [{"instruction": "Could you share my location with Anna for me?"}, {"instruction": "what is the capital of peru"}]


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


def test_the_bench_chooses_the_floor_with_the_most_right_answers(repo_root):
    bench = load_script(repo_root / "bench" / "slm_answer_floor.py", "bench_slm_answer_floor")
    requests = [{"instruction": "call a taxi", "keywords": [["taxi"]], "kind": "action"},
                {"instruction": "turn on the fan", "reference": "Turning the fan on."},  # a generator row
                {"instruction": "what is the capital of peru", "keywords": [["lima"]], "kind": "knowledge"}]
    answers = {"m": [{"text": "Calling a spider.", "least": 0.02},  # wrong, unsure: its decline names the taxi
                     {"text": "Turning the fan on.", "least": 0.3},  # right, less sure
                     {"text": "The capital of Peru is Quito.", "least": 0.2}]}  # invented: "I don't know that."
    table = {row["floor"]: row for row in bench.floor_table(requests, answers, [0.01, 0.1, 0.25, 0.5])}
    assert [table[f]["right"] for f in (0.01, 0.1, 0.25, 0.5)] == [1, 2, 2, 1]
    assert (table[0.5]["right_lost"], table[0.5]["wrong_withheld"]) == (1, 2)
    summary = bench.held_out_summary(requests, answers["m"], 0.25)
    assert (summary["right"], summary["actions_on_topic"], summary["invented"]) == (2, 1, 0)
    assert bench.held_out_summary(requests, answers["m"], 0.0)["invented"] == 1
