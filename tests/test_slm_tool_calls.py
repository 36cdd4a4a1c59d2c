"""Tool calls in answers (slm.tool_calls): parsed and executed, hostile ones refused within bounds, bad ones fall back;
the well-formed measure (slm.metrics.well_formed); the sample's tool rows; a micro model learns to write a call."""

import ast
import math
from datetime import datetime

import pytest
import torch

from duet.synth.alpaca_sample import (CORPUS_ANSWERS, CORPUS_CALLS, CORPUS_REFUSALS, UNKNOWN_ANSWER, make_examples,
                                      tool_examples)
from duet.synth.corpus_text import assistant_requests
from slm.ablation import short_finetune
from slm.data import format_alpaca_example, tokenize_example
from slm.generation import GenerationSettings, generate_answers, generate_model_texts
from slm.metrics import check_answer, is_refusal, repeated_ngram, well_formed, well_formed_share
from slm.modeling import build_scratch_model, train_bpe_tokenizer
from slm import tool_calls
from slm.tool_calls import FALLBACK, LIMITS, ToolCall, calc, convert, execute_calls

NOW = datetime(2026, 12, 6, 15, 5)


@pytest.mark.parametrize("text, shown", [
    ("50 minus 3 is <<calc: 50 - 3>>.", "50 minus 3 is 47."),
    ("12 times 7 is <<calc:12*7>>.", "12 times 7 is 84."),
    ("50 divided by 7 is <<calc: 50 / 7>>.", "50 divided by 7 is 7.14."),
    ("20 percent of 45 is <<calc: 20 * 45 / 100>>.", "20 percent of 45 is 9."),
    ("10 percent of 97 is <<calc: 10 percent of 97>>.", "10 percent of 97 is 9.7."),  # as the request says it
    ("<<calc: 12.5 percent of 8>> and <<calc: -10 percent of 50>>", "1 and -5"),
    ("The square root of 81 is <<calc: sqrt(81)>>.", "The square root of 81 is 9."),
    ("13 squared is <<calc: 13 ** 2>>, and -(2 - 5) is <<calc: -(2 - 5)>>.", "13 squared is 169, and -(2 - 5) is 3."),
    ("64 degrees Celsius is about <<convert: 64 celsius -> fahrenheit>> degrees Fahrenheit.",
     "64 degrees Celsius is about 147.2 degrees Fahrenheit."),
    ("<<convert: 50 fahrenheit -> celsius>> degrees", "10 degrees"),
    ("There are about <<convert: 2 pounds -> grams>> grams in 2 pounds.", "There are about 907.18 grams in 2 pounds."),
    ("3 miles is about <<convert: 3 miles -> kilometers>> kilometers.", "3 miles is about 4.83 kilometers."),
    ("It's <<time>>.", "It's 3:05 p.m."),  # one full stop after "p.m.", not two
    ("Today is <<date>>.", "Today is Sunday, December 6, 2026."),
])
def test_calls_are_executed_and_spliced_into_the_text_around_them(text, shown):
    executed = execute_calls(text, now=NOW)
    assert executed.text == shown and not executed.fell_back
    assert all(call.result is not None and call.error is None for call in executed.calls) and executed.calls


def test_each_call_is_recorded_with_its_tool_input_and_result():
    executed = execute_calls("<<calc: 2 + 2>> and <<convert: 1 kilometer -> meters>> at <<time>>", now=NOW)
    assert executed.calls == (ToolCall("calc", "2 + 2", "4"), ToolCall("convert", "1 kilometer -> meters", "1000"),
                              ToolCall("time", "", "3:05 p.m."))
    assert executed.calls[0].as_dict() == {"tool": "calc", "input": "2 + 2", "result": "4", "error": None}


@pytest.mark.parametrize("request_text, shown", [
    ("Could you share my location with Anna for me?", "Sorry, I can't share your location with Anna."),
    ("hey assistant please take a picture with the phone thanks", "Sorry, I can't take a picture with the phone."),
    ("I need you to read me the latest news headlines.", "Sorry, I can't read you the latest news headlines."),
    ("Book a table at an Italian restaurant.", "Sorry, I can't book a table at an Italian restaurant."),
    ("i want to order a pizza", "Sorry, I can't order a pizza."),
    ("I'd like to book us a table.", "Sorry, I can't book you a table."),
    ("Order me a crème brûlée from Zürich.", "Sorry, I can't order you a crème brûlée from Zürich."),
    ("do the laundry", "Sorry, I can't do the laundry."),  # "do" starts an action here, not a question
    ("Could you tell me what is on at the cinema?", "Sorry, I can't tell you what is on at the cinema."),
    ("could you do me a favour and order a pizza", "Sorry, I can't do you a favour and order a pizza."),
    ("Quick question, turn off the lights.", "Sorry, I can't turn off the lights."),  # the lead is no part of it
])
def test_the_request_tool_repeats_what_was_asked(request_text, shown):
    executed = execute_calls("Sorry, I can't <<request>>.", NOW, request=request_text)
    assert executed.text == shown and not executed.fell_back
    assert executed.calls == (ToolCall("request", "", shown.removeprefix("Sorry, I can't ").removesuffix(".")),)


@pytest.mark.parametrize("request_text", [None, "", "please", "  ?! "])
def test_the_request_tool_without_a_request_falls_back(request_text):
    executed = execute_calls("Sorry, I can't <<request>>.", NOW, request=request_text)
    assert executed.text == FALLBACK and executed.fell_back and executed.calls[0].error
    assert execute_calls("<<request: open the door>>", NOW, request="open the door").fell_back  # no argument


@pytest.mark.parametrize("question", ["how do you say hello in french", "hey assistant what is the plural of mouse",
                                      "Who painted the Mona Lisa?", "is it going to snow", "do you know my name",
                                      "will it rain in Oslo tomorrow", "am I free tomorrow", "can I have a coffee",
                                      "do I need an umbrella", "when is the next train",
                                      "are the lights on in the kitchen", "Quick question. What is the capital of Peru?",
                                      "I want to know who wrote Hamlet", "I need to know the weather",
                                      "When did the fall of the Berlin Wall happen?",
                                      "Quick question. at what temperature does water boil?"])
def test_the_request_tool_does_not_decline_a_question(question):
    # "Sorry, I can't how do you say hello in french." answers nothing and reads wrong: a question falls back
    executed = execute_calls("Sorry, I can't <<request>>.", NOW, request=question)
    assert executed.text == FALLBACK and executed.fell_back and "question" in executed.calls[0].error


def test_text_without_calls_is_untouched():
    assert execute_calls("Turning the kitchen lights on.") == execute_calls("Turning the kitchen lights on.", NOW)
    assert execute_calls("Playing jazz.").text == "Playing jazz." and execute_calls("Playing jazz.").calls == ()


@pytest.mark.parametrize("expression", [
    "9 ** 9 ** 9", "10 ** 100", "2 ** 1000000", "99999999999 * 99999999999", "1e999", "(-8) ** 0.5",  # sizes
    "99999999999999 percent of 99999999999999", "2 ** 10 percent of 9999",
    "10 percent of 97 / 100", "10 percent of 5 ** 2", "2 + 10 percent of 50",  # "percent of" only as the whole call
    "__import__('os').system('true')", "x + 1", "open('/etc/passwd')", "abs(-1)", "sqrt(-4)",  # names, calls
    "(1).real", "'a' * 5", "[1, 2]", "1 if 1 else 2", "lambda: 1", "True + 1", "1 < 2", "7 / 0", "7 % 0",  # not arithmetic
    "-(" * 20 + "1" + ")" * 20, "+".join(["1"] * 40), "1" * 200,  # nesting, node count, length
])
def test_hostile_or_out_of_bounds_calc_is_refused_before_any_large_work(expression, monkeypatch):
    # bounded work, counted rather than timed: every operation the evaluator asks for is recorded, and one past the
    # bounds is not carried out (the call then fails, and the assertions below say why, rather than the test hanging)
    done = []

    def spy(op, compute):
        def run(a, b):
            done.append((op, a, b))
            if op is ast.Pow and abs(a) > 1 and abs(b) * math.log10(abs(a)) > 15.5:
                raise OverflowError("a power past the bounds was asked for")
            return compute(a, b)
        return run

    monkeypatch.setattr(tool_calls, "_BINARY", {op: spy(op, f) for op, f in tool_calls._BINARY.items()})
    executed = execute_calls(f"The answer is <<calc: {expression}>>.")
    assert len(done) <= LIMITS.max_nodes  # no more operations than the syntax tree may hold nodes
    assert all(abs(a) <= LIMITS.max_abs and abs(b) <= LIMITS.max_abs for _, a, b in done)  # on bounded numbers
    # a power is asked for only when its exponent and its result are bounded (9 ** 387420489 would run for minutes)
    assert all(abs(b) <= LIMITS.max_exponent and (abs(a) <= 1 or abs(b) * math.log10(abs(a)) <= 15.5)
               for op, a, b in done if op is ast.Pow)
    assert executed.fell_back and executed.text == FALLBACK
    assert executed.calls and executed.calls[0].result is None and executed.calls[0].error


@pytest.mark.parametrize("text", [
    "The weather is <<weather: paris>>.",  # unknown tool
    "It's <<time: tokyo>>.",  # an argument where none is taken
    "<<calc>>", "<<calc: >>", "<<convert: 3 miles>>", "<<convert: 3 miles -> kelvin>>",  # other dimension
    "<<convert: 3 flurbs -> meters>>", "<<convert: 1e400 meters -> feet>>", "<<convert: 10 meters; print(1) -> feet>>",
    "50 minus 3 is <<calc: 50 - 3",  # cut off mid-call
    "50 minus 3 is calc: 50 - 3>>.", "<<calc: 1 + <<calc: 2>>>>", "a << b",  # stray brackets
])
def test_unknown_or_malformed_call_falls_back_to_a_plain_answer(text):
    executed = execute_calls(text, now=NOW)
    assert executed.fell_back and executed.text == FALLBACK and "<<" not in executed.text


def test_bounded_helpers_refuse_with_tool_errors():
    assert calc("2 ** 10") == "1024" and convert("0 celsius -> fahrenheit") == "32"
    with pytest.raises(ValueError, match="exponent"):
        calc("2 ** 65")
    with pytest.raises(ValueError, match="longer than"):
        calc("1 + " * 40 + "1")


def test_every_computed_corpus_template_works_out_its_reference_through_its_call():
    """Training rows answer with the call; the executed call gives the reference (worked out by formula, not pint)
    as slm.metrics.check_answer judges it, for every draw of every computed template."""
    assert set(CORPUS_CALLS) <= set(CORPUS_ANSWERS) and not set(CORPUS_REFUSALS) & set(CORPUS_ANSWERS)
    seen = set()
    for sentence in assistant_requests(6000, seed=11):
        if sentence.template in CORPUS_CALLS:
            seen.add(sentence.template)
            executed = execute_calls(CORPUS_CALLS[sentence.template](sentence.slots))
            verdict = check_answer(sentence.text, CORPUS_ANSWERS[sentence.template](sentence.slots), executed.text)
            assert verdict.correct, (sentence.text, executed, verdict.why)
    assert seen == set(CORPUS_CALLS)


def test_sample_rows_teach_calls_and_refusals_that_execute():
    rows = make_examples(1200, seed=5)
    calls = [row for row in rows if "<<" in row["output"]]
    refusals = [row for row in rows if row["output"] == UNKNOWN_ANSWER]
    tools = {call.tool for row in calls for call in execute_calls(row["output"], NOW, row["instruction"]).calls}
    assert tools == {"calc", "convert", "time", "date", "request"} and len(refusals) >= 30
    assert not [row for row in calls if execute_calls(row["output"], NOW, row["instruction"]).fell_back]
    # no plain worked-out sum is left to contradict the calls
    assert not [row for row in rows if row["instruction"].lower().startswith("what is") and " plus " in
                row["instruction"] and "<<calc" not in row["output"]]
    mixed = tool_examples(90, seed=1)
    assert len(mixed) == 90 and all("<<" in row["output"] or is_refusal(row["output"]) for row in mixed)
    assert tool_examples(90, seed=1) == mixed


@pytest.mark.parametrize("answer, ok", [
    ("50 minus 3 is 47.", True),
    ("OK, I've set two timers: one for 5 minutes and one for 10 minutes.", True),  # numbers may repeat a form
    ("Skipping to the next song.", True),  # an inflection of a WordNet lemma
    ("I don't know that.", True),
    ("Calling Xandrilla.", False), ("Gran is Portundd.", False),  # not words
    ("Sarah call with my Sarah call with my Sarah.", False), ("The spoage spoage spoage.", False),  # loops
    ("", False), ("--", False),
])
def test_well_formed_on_constructed_answers(answer, ok):
    lexicon = frozenset("ok i minus is i've set two timer one for minute and skip to the next song don't know that "
                        "calling gran sarah call with my".split())
    assert well_formed(answer, lexicon).ok is ok


def test_well_formed_takes_the_requests_words_and_names_what_is_wrong():
    lexicon = frozenset("calling".split())
    assert well_formed("Calling Xandrilla.", lexicon, request="call xandrilla").ok
    assert well_formed_share(["Calling.", "Calling Portundd."], lexicon) == 50.0
    assert well_formed_share(["Calling."], None) is None  # no lexicon (WordNet not installed): not measured
    assert well_formed("Calling Portundd.", lexicon).why == "not words: portundd"
    assert repeated_ngram("with my sarah call with my sarah") == ("with", "my", "sarah")


@pytest.mark.parametrize("answer, refused", [
    ("I don't know that.", True), ("I don't have access to live weather data, so I can't tell you.", True),
    ("I can't access your calendar, so I don't know your plans.", True),
    (FALLBACK, True), ("Mount Everest is 60 million years old.", False), ("Playing jazz.", False)])
def test_refusals_are_recognised(answer, refused):
    assert is_refusal(answer) is refused


def test_a_micro_model_trained_on_tool_rows_learns_to_write_the_call():
    """150 steps of a 2-layer model on 12 sum and conversion rows: the loss falls, its greedy answers hold the call,
    and generation hands back the executed text with the calls recorded."""
    rows = [{"instruction": f"what is {a} plus {b}", "input": "", "output": f"{a} plus {b} is <<calc: {a} + {b}>>."}
            for a, b in ((12, 7), (30, 4), (5, 61), (44, 18), (9, 9), (70, 25))] + [
           {"instruction": f"convert {n} miles to kilometers", "input": "",
            "output": f"{n} miles is about <<convert: {n} miles -> kilometers>> kilometers."} for n in (2, 3, 5, 8, 10, 20)]
    tokenizer = train_bpe_tokenizer([format_alpaca_example(r) for r in rows], vocab_size=400)
    model = build_scratch_model(tokenizer, n_layer=2, n_embd=48, n_head=4, n_positions=128, dropout=0.0, seed=0)
    torch.manual_seed(0)
    losses = short_finetune(model, [tokenize_example(r, tokenizer, 128) for r in rows], tokenizer.eos_token_id,
                            steps=150, learning_rate=3e-3, batch_size=12, mask_prompt=True, seed=0, log=lambda _: None)
    assert sum(losses[-10:]) / 10 < 0.2 * sum(losses[:10]) / 10
    model.eval()
    greedy = GenerationSettings(max_new_tokens=40, repetition_penalty=1.0)
    written = generate_model_texts(model, tokenizer, rows, greedy, batch_size=12)
    assert sum("<<calc:" in text for text in written[:6]) >= 5 and sum("<<convert:" in text for text in written[6:]) >= 5
    answers = generate_answers(model, tokenizer, rows, greedy, batch_size=12)
    assert all("<<" not in answer.text for answer in answers)
    assert sum(answer.text == execute_calls(row["output"]).text for row, answer in zip(rows, answers)) >= 6
    assert answers[0].calls == (ToolCall("calc", "12 + 7", "19"),) or answers[0].fell_back


def test_tool_rows_are_mixed_into_the_training_split_only(tmp_path):
    import json

    from slm.config import ConfigError, load_config
    from slm.finetune import load_splits

    rows = tmp_path / "tool_rows.json"
    rows.write_text(json.dumps(tool_examples(30, seed=2)))
    overrides = ["data.source=samples/alpaca_sample.json", "data.max_examples=200"]
    plain = load_splits(load_config("slm_gpt2_alpaca", overrides))
    mixed = load_splits(load_config("slm_gpt2_alpaca", [*overrides, f"data.tool_rows={rows}"]))
    assert mixed["test"] == plain["test"] and mixed["validation"] == plain["validation"]
    assert mixed["train"][: len(plain["train"])] == plain["train"] and len(mixed["train"]) == len(plain["train"]) + 30
    assert all("<<" in row["output"] or is_refusal(row["output"]) for row in mixed["train"][len(plain["train"]):])
    with pytest.raises(ConfigError, match="data.tool_rows: .*missing.json"):
        load_splits(load_config("slm_gpt2_alpaca", [*overrides, f"data.tool_rows={tmp_path}/missing.json"]))
