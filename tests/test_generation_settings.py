"""slm.generation: one set of language-model decoding defaults, the same flags in every script that generates,
and a bad value refused by name."""

import io
import sys
from dataclasses import fields

import pytest
import torch

from slm.generation import GenerationSettings, GenerationSettingsError, flag, generation_settings_from_args
from tests.script_helpers import load_script

# each script's parser, with the positional arguments it needs to parse
SCRIPTS = {"slm/generate.py": ["model", "hi"], "tools/pipeline.py": ["a.flac"], "bench/pipeline_latency.py": []}


def script_module(repo_root, script):
    return load_script(repo_root / script, "generation_flags_" + script.replace("/", "_").removesuffix(".py"))


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_script_that_generates_has_the_same_flags_and_defaults(repo_root, script):
    parser = script_module(repo_root, script).get_parser()
    args = parser.parse_args(SCRIPTS[script])
    assert generation_settings_from_args(args) == GenerationSettings()
    changed = parser.parse_args([*SCRIPTS[script], "--strategy", "sample", "--max-new-tokens", "7", "--num-beams",
                                 "3", "--temperature", "0.5", "--top-k", "9", "--top-p", "0.5",
                                 "--repetition-penalty", "1.3", "--min-token-prob", "0.2"])
    assert generation_settings_from_args(changed) == GenerationSettings("sample", 7, 3, 0.5, 9, 0.5, 1.3, 0.2)


def test_the_defaults_are_the_pipelines_that_made_the_demos_answers():
    assert GenerationSettings() == GenerationSettings("greedy", max_new_tokens=64, num_beams=4, temperature=0.8,
                                                      top_k=50, top_p=0.95, repetition_penalty=1.1,
                                                      min_token_prob=None)  # the model folder's own floor


def test_the_kwargs_follow_the_strategy():
    assert GenerationSettings("greedy").generate_kwargs(5)["do_sample"] is False
    assert GenerationSettings("beam", num_beams=3).generate_kwargs(5)["num_beams"] == 3
    sample = GenerationSettings("sample", temperature=0.7, top_k=20, top_p=0.9, repetition_penalty=1.2).generate_kwargs(5)
    assert (sample["do_sample"], sample["top_k"], sample["top_p"]) == (True, 20, 0.9)
    assert sample["num_beams"] == 1  # one sequence a row, whatever the model's generation_config says
    assert "logits_processor" not in GenerationSettings(repetition_penalty=1.0).generate_kwargs(5)


def test_the_repetition_penalty_spares_the_prompt():
    """A word of the request may be repeated in the answer (a name, a day, a number); the answer's own may not."""
    (penalty,) = GenerationSettings(repetition_penalty=2.0).generate_kwargs(prompt_tokens=3)["logits_processor"]
    input_ids = torch.tensor([[7, 8, 9, 4]])  # a 3-token prompt, then the answer's first token (4)
    scores = penalty(input_ids, torch.full((1, 10), 3.0))
    assert scores[0, [7, 8, 9]].tolist() == [3.0, 3.0, 3.0]  # the prompt's tokens: as the model scored them
    assert scores[0, 4].item() == 1.5  # the answer's own token: penalised


@pytest.mark.parametrize("bad, message", [
    (dict(strategy="nucleus"), "--strategy must be one of greedy, beam, sample, got 'nucleus'"),
    (dict(strategy="beam", num_beams=1), "beam search needs --num-beams >= 2, got 1"),
    (dict(strategy="sample", temperature=0), "sampling needs --temperature > 0, got 0"),
    (dict(max_new_tokens=0), "--max-new-tokens must be >= 1, got 0"),
    (dict(repetition_penalty=0), "--repetition-penalty must be > 0, got 0"),
    (dict(top_k=-1), "--top-k must be >= 0 (0 = off), got -1"),
    (dict(top_p=0), "--top-p must be in (0, 1], got 0"),
    (dict(top_p=1.5), "--top-p must be in (0, 1], got 1.5"),
    (dict(strategy="greedy", top_p=2), "--top-p must be in (0, 1], got 2"),  # checked whatever the strategy
    (dict(min_token_prob=1.5), "--min-token-prob must be in [0, 1] (0 = off), got 1.5"),
    (dict(min_token_prob=float("nan")), "--min-token-prob must be in [0, 1] (0 = off), got nan"),
])
def test_validate_names_the_bad_value(bad, message):
    with pytest.raises(GenerationSettingsError) as error:
        GenerationSettings(**bad).validate()
    assert str(error.value) == message
    with pytest.raises(GenerationSettingsError):  # model.generate is never reached with it
        GenerationSettings(**bad).generate_kwargs(5)


def test_every_field_is_named_by_its_flag_in_slm_generate(repo_root, capsys):
    generate = script_module(repo_root, "slm/generate.py")
    for field in fields(GenerationSettings):
        assert flag(field.name) in generate.get_parser().format_help()
    assert generate.main(["no/such/model", "hi", "--top-p", "2"]) == 2  # refused before the model loads
    assert capsys.readouterr().err.strip() == "generate: error: --top-p must be in (0, 1], got 2"


def test_slm_generate_prints_the_answer_read_and_names_a_withheld_one_on_stderr(repo_root, capsys, monkeypatch,
                                                                                tmp_path):
    from slm.tool_calls import ExecutedText

    generate = script_module(repo_root, "slm/generate.py")
    answers = {"call grandma": ExecutedText("Sorry, I can't call grandma.", withheld="Calling Chloe."),
               "call mum": ExecutedText("Calling mum.")}
    monkeypatch.setattr(generate, "load_model", lambda path: (None, None))
    monkeypatch.setattr(generate, "respond_with_calls", lambda model, tokenizer, text, *rest: answers[text])
    assert generate.main(["model", "call grandma", "--log", str(tmp_path / "log.txt")]) == 0
    out, err = capsys.readouterr()
    assert out == "Sorry, I can't call grandma.\n"
    assert err == "generate: withheld (the model was unsure of it): Calling Chloe.\n"
    assert generate.main(["model", "call mum", "--log", str(tmp_path / "log.txt")]) == 0
    assert capsys.readouterr() == ("Calling mum.\n", "")
    # several instructions (standard input): each withheld answer names its instruction
    monkeypatch.setattr(sys, "stdin", io.StringIO("call mum\ncall grandma\n"))
    assert generate.main(["model", "-", "--log", str(tmp_path / "log.txt")]) == 0
    out, err = capsys.readouterr()
    assert out == "call mum\tCalling mum.\ncall grandma\tSorry, I can't call grandma.\n"
    assert err == "generate: withheld for 'call grandma' (the model was unsure of it): Calling Chloe.\n"
