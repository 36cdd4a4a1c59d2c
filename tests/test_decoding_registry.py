"""A decoding strategy defined in one place (here, in the test) is reachable every way a user or a script reaches the
built-in ones: the command line of every entry script that decodes (its flags and help derived from the settings
dataclass), a model's decoding.json (written, read, checked), the pipeline's and the server's option resolution, a
bench's choices, and the decode paths through the decoder it builds."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass

import pytest

from duet.asr.decoding import (CtcDecoder, DecodingInputError, StrategySettings, build_decoder, decoding_settings,
                               option, register, strategies)
from duet.asr.decoding import registry
from duet.asr.decoding.file import DecodingFileError, read_decoding_file, write_decoding_file
from duet.asr.decoding.nemo_decoding import greedy_config
from duet.asr.inference import transcribe_files, transcribe_files_with_words
from tests.asr_helpers import REPO
from tests.script_helpers import load_script


@dataclass(frozen=True)
class ShoutSettings(StrategySettings):
    """Greedy decoding, its transcripts in capitals with ``marks`` exclamation marks: a strategy only a test has."""

    strategy = "shout"
    summary = "greedy, in capitals (a test's strategy)"

    marks: int = option(1, "exclamation marks after each transcript", low=0, high=3)

    def describe(self) -> str:
        return f"shout({self.marks})"

    def build(self, model, reuse=None) -> CtcDecoder:
        return ShoutDecoder(model, self, greedy_config(model))


class ShoutDecoder(CtcDecoder):
    def decode(self, log_probs, lengths, audios=None, words=False):
        heard = super().decode(log_probs, lengths, audios, words)
        return [type(t)(t.text.upper() + "!" * self.settings.marks, t.words) for t in heard]


@pytest.fixture
def shout(monkeypatch):
    """ShoutSettings registered for this test alone."""
    monkeypatch.setitem(registry._STRATEGIES, ShoutSettings.strategy, ShoutSettings)
    assert register(ShoutSettings) is ShoutSettings and "shout" in strategies()
    return ShoutSettings


def test_the_command_line_takes_its_options_with_their_help_and_bounds(shout):
    from duet.cli.cli_args import add_decoding_arguments, decoding_settings_from_args

    parser = argparse.ArgumentParser()
    add_decoding_arguments(parser)
    assert "exclamation marks after each transcript (shout; an integer in 0..3; default: 1)" in \
        " ".join(parser.format_help().split())
    settings = decoding_settings_from_args(parser.parse_args(["--decoding", "shout", "--marks", "3"]))
    assert settings == ShoutSettings(marks=3)
    with pytest.raises(DecodingInputError, match=r"^--marks must be an integer in 0\.\.3, got 5$"):
        decoding_settings_from_args(parser.parse_args(["--decoding", "shout", "--marks", "5"]))
    with pytest.raises(DecodingInputError, match="^--beam-size not used by --decoding shout$"):
        decoding_settings_from_args(parser.parse_args(["--decoding", "shout", "--beam-size", "4"]))
    with pytest.raises(DecodingInputError, match="^--marks not used by --decoding beam$"):
        decoding_settings_from_args(parser.parse_args(["--decoding", "beam", "--marks", "2"]))


def test_a_models_decoding_json_saves_and_reads_it(shout, tmp_path):
    saved = tmp_path / "decoding.json"
    write_decoding_file(saved, ShoutSettings(marks=2), min_confidence=0.3)
    assert json.loads(saved.read_text()) == {"strategy": "shout", "marks": 2, "min_confidence": 0.3}
    read = read_decoding_file(saved)
    assert (read.settings, read.min_confidence) == (ShoutSettings(marks=2), 0.3)
    saved.write_text(json.dumps({"strategy": "shout", "marks": -1}))
    with pytest.raises(DecodingFileError, match=r"decoding.json: 'marks' must be an integer in 0\.\.3, got -1"):
        read_decoding_file(saved)


def test_the_pipeline_and_the_server_resolve_it_from_options_and_from_the_models_file(shout, tmp_path):
    from duet.cli.cli_args import pipeline_settings_from_args

    model = tmp_path / "m.nemo"
    model.write_bytes(b"x")
    write_decoding_file(tmp_path / "decoding.json", ShoutSettings(marks=2))
    for script in ("pipeline", "serve"):
        tool = load_script(REPO / "tools" / f"{script}.py", f"{script}_for_registry")
        audio = ["a.flac"] if script == "pipeline" else []
        args = tool.get_parser().parse_args([*audio, "--asr-model", str(model)])
        settings, line = pipeline_settings_from_args(args)
        assert settings.asr_decoding == ShoutSettings(marks=2) and line.startswith("decoding: shout(2) from ")
        args = tool.get_parser().parse_args([*audio, "--asr-model", str(model), "--marks", "3"])
        assert pipeline_settings_from_args(args)[0].asr_decoding == ShoutSettings(marks=3)


def test_a_bench_offers_it():
    parser = load_script(REPO / "bench" / "asr_vs_whisper.py", "asr_vs_whisper_for_registry").get_parser()
    assert "shout" not in parser.format_help()  # not registered here: the choices are read when the parser is built


def test_a_bench_built_after_registering_offers_it(shout):
    parser = load_script(REPO / "bench" / "asr_vs_whisper.py", "asr_vs_whisper_for_registry").get_parser()
    assert parser.parse_args(["--model", "m.nemo", "--decoding", "shout"]).decoding == "shout"


def test_its_decoder_runs_on_every_decode_path(shout, micro_model_and_manifest):
    model, _, _, entries = micro_model_and_manifest
    paths = [e["audio_filepath"] for e in entries]
    greedy = transcribe_files(model, paths, batch_size=3, workers=1)
    decoder = build_decoder(model, decoding_settings("shout", marks=2))
    for workers in (1, 2):  # in this process and in forked workers
        assert transcribe_files(model, paths, batch_size=3, workers=workers, decoder=decoder) == [
            text.upper() + "!!" for text in greedy]
    timed = transcribe_files_with_words(model, paths, batch_size=3, workers=1, decoder=decoder)
    assert [t.text for t in timed] == [text.upper() + "!!" for text in greedy]
    assert model.cfg.decoding.strategy != "shout"  # the model itself is never told
