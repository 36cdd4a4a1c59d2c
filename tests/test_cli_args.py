"""duet/cli/cli_args.py: shared options become validated settings; options a mode would ignore are named."""

import argparse

import pytest

from duet.asr.batching import OfflineBatching
from duet.asr.decoding import DecodingInputError, decoding_settings
from duet.cli.cli_args import (add_batching_arguments, add_decoding_arguments, decoding_settings_from_args,
                           offline_batching_from_args)
from duet.errors import AsrInputError


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_batching_arguments(parser, OfflineBatching(batch_size=32), streaming=True)
    add_decoding_arguments(parser, "--decoding")
    return parser.parse_args(argv)


def test_given_options_replace_the_defaults_and_the_rest_stay():
    assert offline_batching_from_args(parse(["--workers", "2"]), OfflineBatching(batch_size=32)) == \
        OfflineBatching(batch_size=32, workers=2)
    assert decoding_settings_from_args(parse(["--decoding", "beam", "--beam-size", "8"])) == \
        decoding_settings("beam", beam_size=8)


@pytest.mark.parametrize("argv, message", [
    (["--batch-size", "0"], "^--batch-size must be 1 or more, got 0$"),
    (["--workers", "0"], "^--workers must be 1 or more, got 0$"),
])
def test_out_of_range_batching_is_named_by_its_flag(argv, message):
    with pytest.raises(AsrInputError, match=message):
        offline_batching_from_args(parse(argv), OfflineBatching(batch_size=32))


def test_batching_options_with_stream_are_refused_by_name():
    with pytest.raises(AsrInputError, match=r"^--batch-size, --workers not used with --stream"):
        offline_batching_from_args(parse(["--batch-size", "4", "--workers", "2"]), OfflineBatching(), streaming=True)


def test_decoding_settings_validate_before_any_model_loads():
    with pytest.raises(DecodingInputError, match="beam-size must be an integer >= 1, got 0"):
        decoding_settings_from_args(parse(["--decoding", "beam", "--beam-size", "0"]))
    with pytest.raises(DecodingInputError, match="strategy beam_lm needs ngram_lm <token ARPA>"):
        decoding_settings("beam_lm").validate()
    with pytest.raises(DecodingInputError, match="strategy .wfst.: unknown decoding strategy"):
        decoding_settings("wfst").validate()
    with pytest.raises(AsrInputError, match="max_chunk_seconds must be > 0, got 0"):
        OfflineBatching(max_chunk_seconds=0).validate()


@pytest.mark.parametrize("settings", [
    decoding_settings(),
    decoding_settings("beam", beam_size=8, beta=1.25, blank_skip=0.999),
    decoding_settings("beam", beta=-1e-05),  # a negative value would read as a flag after a space
    decoding_settings("beam_lm", ngram_lm="-lm.arpa", alpha=0.5, beta=-2.0, whisper_weight=0.25),
    decoding_settings("joint", ngram_lm="lm.arpa", alpha=1.1, beta=4.0, ctc_weight=0.5, lm_weight=0.2,
                      token_bonus=2.0, whisper_sure=-0.3, ctc_candidates=5, whisper_window=15.0, ctc_spacing=0.0),
])
def test_settings_given_back_as_command_line_options_read_as_the_same_settings(settings):
    """What the demo hands a bench it runs: the settings as flags, read back by the script's own parser."""
    parser = argparse.ArgumentParser()
    add_decoding_arguments(parser)
    assert decoding_settings_from_args(parser.parse_args(settings.command_line())) == settings
