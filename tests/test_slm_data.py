"""Alpaca template, tokenisation and collator exactness (first-EOS rule, prompt masking)."""

import json
import os
import sys
from pathlib import Path

import pytest
import torch

from slm.config import ConfigError
from slm.data import (AlpacaCollator, format_alpaca_example, format_alpaca_prompt, load_alpaca, replay_sentences,
                      split_examples, tokenize_example, tokenize_text)
from slm.modeling import train_bpe_tokenizer

GPT2_EOS = 50256


def test_template_without_input_is_exact():
    assert format_alpaca_prompt("Name a colour.") == (
        "Below is an instruction that describes a task. Write a response that appropriately completes the request."
        "\n\n### Instruction:\nName a colour.\n\n### Response:\n")


def test_template_with_input_is_exact():
    text = format_alpaca_example({"instruction": "Sort the numbers.", "input": "3, 1", "output": "1, 3"})
    assert text == (
        "Below is an instruction that describes a task. Write a response that appropriately completes the request."
        "\n\n### Instruction:\nSort the numbers.\n\n### Input:\n3, 1\n\n### Response:\n1, 3")


@pytest.fixture(scope="module")
def byte_bpe():
    texts = [format_alpaca_example({"instruction": f"Add {n} and {n + 1}.", "input": "", "output": f"{2 * n + 1}"})
             for n in range(50)]
    return train_bpe_tokenizer(texts, vocab_size=300)


def gpt2_tokenizer():
    """The real GPT-2 tokenizer: vocab.json/merges.txt that tools/setup.sh takes from the openai-whisper==20230124 sdist."""
    folder = Path(os.environ.get("GPT2_TOKENIZER_DIR", Path(sys.prefix) / "share" / "gpt2-tokenizer"))
    if not (folder / "vocab.json").is_file() or not (folder / "merges.txt").is_file():
        pytest.skip(f"GPT-2 vocab.json/merges.txt not in {folder} (tools/setup.sh fetches them; or set GPT2_TOKENIZER_DIR)")
    from transformers import GPT2TokenizerFast

    tokenizer = GPT2TokenizerFast.from_pretrained(str(folder))
    tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def check_collate_rules(tokenizer):
    rows = [{"instruction": "Say hi.", "input": "", "output": "Hi!"},
            {"instruction": "Sort the numbers in ascending order.", "input": "9, 4, 7", "output": "4, 7, 9"}]
    tokenized = [tokenize_example(r, tokenizer, max_length=512) for r in rows]
    eos = tokenizer.eos_token_id
    for row, raw in zip(tokenized, rows):
        assert row["input_ids"][-1] == eos
        assert tokenizer.decode(row["input_ids"][:-1]) == format_alpaca_example(raw)
        assert row["input_ids"][:-1] == tokenizer.encode(format_alpaca_example(raw))  # the prompt/answer cut adds no split
        assert row["input_ids"][: row["prompt_length"]] == tokenizer.encode(format_alpaca_prompt(raw["instruction"], raw["input"]))
    short, long = (len(t["input_ids"]) for t in tokenized)
    assert short < long

    batch = AlpacaCollator(eos)(tokenized)
    assert batch["input_ids"].shape == (2, long)
    assert batch["input_ids"][0, short:].eq(eos).all()  # padded with EOS
    labels = batch["labels"][0]
    assert labels[short - 1] == eos  # the row's own (first) EOS stays a target
    assert labels[short:].eq(-100).all()  # every padding EOS is ignored
    assert labels[:short].tolist() == tokenized[0]["input_ids"]  # unshifted: the model shifts
    assert batch["labels"][1].tolist() == tokenized[1]["input_ids"]
    assert batch["attention_mask"].sum(1).tolist() == [short, long]

    masked = AlpacaCollator(eos, mask_prompt=True)(tokenized)["labels"]
    for i, row in enumerate(tokenized):
        p, n = row["prompt_length"], len(row["input_ids"])
        assert masked[i, :p].eq(-100).all()
        assert masked[i, p:n].tolist() == row["input_ids"][p:]  # answer + EOS
        assert masked[i, n:].eq(-100).all()
    assert torch.equal(masked[0, short - 1], torch.tensor(eos))


def test_collate_rules_with_byte_level_bpe(byte_bpe):
    check_collate_rules(byte_bpe)


def test_collate_rules_with_real_gpt2_tokenizer():
    tokenizer = gpt2_tokenizer()
    assert tokenizer.eos_token_id == GPT2_EOS and len(tokenizer) == 50257
    check_collate_rules(tokenizer)


def test_truncation_keeps_max_length(byte_bpe):
    row = tokenize_example({"instruction": "Add 1 and 2.", "input": "", "output": "3 " * 200}, byte_bpe, max_length=40)
    assert len(row["input_ids"]) == 40 and row["input_ids"][-1] != byte_bpe.eos_token_id


def test_split_is_85_10_5_deterministic_and_disjoint():
    rows = [{"instruction": str(i), "input": "", "output": ""} for i in range(1000)]
    a, b = split_examples(rows, [0.85, 0.10, 0.05], seed=1), split_examples(rows, [0.85, 0.10, 0.05], seed=1)
    assert a == b
    assert [len(a[k]) for k in ("train", "test", "validation")] == [850, 100, 50]
    ids = [r["instruction"] for part in a.values() for r in part]
    assert sorted(ids) == sorted(r["instruction"] for r in rows)
    assert split_examples(rows, [0.85, 0.10, 0.05], seed=2)["test"] != a["test"]


def test_bad_data_file_names_row(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"instruction": "x", "input": "", "output": "y"}, {"instruction": "z", "input": ""}]))
    with pytest.raises(ValueError, match=r"bad.json: row 1 lacks the string field 'output'"):
        load_alpaca(str(bad))


def test_bundled_sample_schema_and_size(repo_root):
    path = repo_root / "samples" / "alpaca_sample.json"
    rows = load_alpaca(str(path))
    assert len(rows) >= 1000 and path.stat().st_size < 2_000_000
    assert len({(r["instruction"], r["input"]) for r in rows}) == len(rows)
    spoken = [r for r in rows if r["instruction"] == r["instruction"].lower() and not any(c in r["instruction"] for c in ".,?!0123456789")]
    assert len(spoken) > 200  # ASR-style requests: lower case, no punctuation, numbers as words


def test_bundled_sample_never_teaches_the_speech_sample_held_out_sentences(repo_root):
    # the voice pipeline is scored on the speech sample's test-clean requests: the SLM must not have seen them
    from duet.synth.corpus import held_out_texts
    from duet.text import normalize_text
    from duet.synth.alpaca_sample import asr_form, make_examples

    held_out = set(held_out_texts())
    assert len(held_out) > 100
    for rows in load_alpaca(str(repo_root / "samples" / "alpaca_sample.json")), make_examples(3000, seed=7):
        said = [(normalize_text(r["instruction"]), asr_form(r["instruction"])) for r in rows]
        assert [s for s in said if set(s) & held_out] == []


def test_sample_generator_is_deterministic_and_arithmetic_is_right():
    from duet.synth.alpaca_sample import make_examples, number_to_words
    from slm.tool_calls import execute_calls

    assert make_examples(200, seed=3) == make_examples(200, seed=3)
    assert number_to_words(0) == "zero" and number_to_words(45) == "forty five"
    assert number_to_words(108) == "one hundred and eight" and number_to_words(2001) == "two thousand and one"
    ops = {"plus": lambda a, b: a + b, "minus": lambda a, b: a - b, "times": lambda a, b: a * b,
           "divided by": lambda a, b: round(a / b, 2)}
    checked = 0
    for row in make_examples(1500, seed=0):
        for name, op in ops.items():
            words = execute_calls(row["output"]).text.rstrip(".").split(f" {name} ")  # the sums are tool calls
            if len(words) == 2 and " is " in words[1]:
                b, result = words[1].split(" is ")
                assert op(int(words[0]), int(b)) == pytest.approx(float(result)), row
                checked += 1
    assert checked > 50


@pytest.mark.parametrize("stand_in", [0, 2])
def test_a_replayed_sentence_is_a_target_from_its_first_token_but_never_the_tokenizers_own(stand_in):
    """Replay rows of plain English: with the prompt masked, every token of the sentence and its end-of-text token
    are targets; what the tokenizer puts first (the converted Whisper GPT-2's stand-in for its prefix) is not."""
    from tokenizers.processors import TemplateProcessing

    from slm.modeling import EOS_TOKEN

    tokenizer = train_bpe_tokenizer(["the cat sat on the mat", "a dog ran"] * 5, vocab_size=300)
    eos = tokenizer.eos_token_id
    if stand_in:
        tokenizer._tokenizer.post_processor = TemplateProcessing(single=" ".join([EOS_TOKEN] * stand_in) + " $A",
                                                                 special_tokens=[(EOS_TOKEN, eos)])
    row = tokenize_text("the cat sat", tokenizer, max_length=64)
    text_ids = tokenizer.encode("the cat sat", add_special_tokens=False)
    assert row["input_ids"] == [eos] * stand_in + text_ids + [eos] and row["prompt_length"] == stand_in
    batch = AlpacaCollator(eos, mask_prompt=True)([row, tokenize_text("a dog ran on the mat", tokenizer, 64)])
    labels = batch["labels"][0].tolist()
    assert labels[:stand_in] == [-100] * stand_in and labels[stand_in:len(row["input_ids"])] == text_ids + [eos]


def test_replay_sentences_are_drawn_by_the_seed_and_a_missing_or_short_file_is_named(tmp_path):
    text = tmp_path / "english.txt"
    text.write_text("".join(f"sentence number {i}\n" for i in range(50)) + "\n  \n")
    drawn = replay_sentences(text, 0.5, 20, seed=123)
    assert len(drawn) == 10 == len(set(drawn)) and drawn == replay_sentences(text, 0.5, 20, seed=123)
    assert drawn != replay_sentences(text, 0.5, 20, seed=124) and all(line.strip() for line in drawn)
    with pytest.raises(ConfigError, match="data.replay_text: .*missing.txt does not exist .*make_english_text.py"):
        replay_sentences(tmp_path / "missing.txt", 0.5, 20, seed=1)
    with pytest.raises(ConfigError, match="has 50 sentences.*wants 60"):
        replay_sentences(text, 3.0, 20, seed=1)


def test_spoken_rows_are_in_the_form_the_pipeline_gives_the_model():
    """The voice pipeline gives the model ``duet.text.request_text`` of a transcript (numbers in digits): the sample's
    requests in the recogniser's form are in that form already, so training and answering see the same text."""
    from duet.synth.alpaca_sample import make_examples
    from duet.text import request_text

    spoken = [r["instruction"] for r in make_examples(1500, seed=5) if not r["input"]
              and r["instruction"] == r["instruction"].lower() and not any(c in r["instruction"] for c in ",?!")]
    assert [s for s in spoken if request_text(s) != s] == []
    assert sum(any(c.isdigit() for c in s) for s in spoken) > 100


def test_an_action_it_cannot_take_is_declined_by_name_in_the_second_person():
    import random

    from duet.synth.alpaca_sample import _unsupported
    from slm.tool_calls import execute_calls

    rows = [_unsupported(random.Random(seed)) for seed in range(60)]
    for instruction, output in rows:
        answer = execute_calls(output, request=instruction).text  # the request tool repeats what was asked
        assert answer.startswith("Sorry, I can't ") and answer.endswith("."), (instruction, answer)
        asked = answer.removeprefix("Sorry, I can't ").rstrip(".").replace("your", "my").replace("you", "me")
        assert asked.lower() in instruction.lower(), (instruction, answer)
    assert any(" your " in execute_calls(output, request=instruction).text for instruction, output in rows)


def test_no_request_is_both_declined_and_carried_out_in_the_sample():
    # the declines that share a verb with a skill ("start a workout" beside "start a timer") must not name a request
    # the sample also carries out ("turn on the television" is an appliance it turns on): the model would learn both
    from duet.synth.alpaca_sample import DECLINE, make_examples
    from slm.tool_calls import asked_words

    def asked(row: dict) -> str:
        return " ".join(asked_words(row["instruction"])).lower()

    rows = make_examples(3000, seed=3)
    declined = {asked(r) for r in rows if r["output"] == DECLINE}
    answered_otherwise = {asked(r) for r in rows if r["output"] != DECLINE and not r["input"]}
    assert len(declined) > 50 and declined & answered_otherwise == set()


def test_calls_and_timer_controls_name_who_and_which_timer_the_request_named():
    import random

    from duet.synth.alpaca_sample import _call, _name, _timer_control

    for seed in range(40):
        instruction, answer = _call(random.Random(seed))
        assert answer.startswith("Calling ") and answer.removeprefix("Calling ").rstrip(".") in instruction
        instruction, answer = _timer_control(random.Random(seed))
        named = instruction.lower().split(" timer")[0].split()[-1]  # "pause the pasta timer" -> "pasta"
        named_in_answer = answer.lower().removeprefix("i've cancelled the ").split("timer")[0].strip()
        assert named_in_answer == ("" if named in ("the", "my") else named), (instruction, answer)
    assert _name("aunt rosa") == "Aunt Rosa" and _name("my boss") == "my boss" and _name("new york") == "New York"


def test_split_digits_writes_each_digit_alone_and_survives_a_save(tmp_path):
    from transformers import AutoTokenizer

    from slm.modeling import load_tokenizer, split_digits

    tokenizer = gpt2_tokenizer()
    before = tokenizer.tokenize(" 623 squared is <<calc: 623 ** 2>>.")
    assert "23" in before  # GPT-2's merges write 623 as " 6" + "23"
    split_digits(tokenizer)
    once = repr(tokenizer.backend_tokenizer.pre_tokenizer)
    split_digits(tokenizer)  # a second call changes nothing
    assert repr(tokenizer.backend_tokenizer.pre_tokenizer) == once and once.count("Digits") == 1
    after = tokenizer.tokenize(" 623 squared is <<calc: 623 ** 2>>.")
    assert [t for t in after if any(c.isdigit() for c in t)] == ["6", "2", "3", "6", "2", "3", "2"]
    assert tokenizer.decode(tokenizer(" 623 squared")["input_ids"]) == " 623 squared"  # the text is unchanged
    assert "\u0120squared" in after and "\u0120" in after  # words as before; a number's space a token of its own
    tokenizer.save_pretrained(tmp_path)
    assert load_tokenizer(tmp_path).tokenize(" 10 percent of 97") == tokenizer.tokenize(" 10 percent of 97")
    # GPT-2's own tokenizer class rebuilds GPT-2's pre-tokenizer on loading: load_tokenizer splits again
    assert AutoTokenizer.from_pretrained(tmp_path).tokenize(" 97") == ["\u012097"]
