"""Command-line options that several entry scripts share, and their conversion into the library's typed
settings (a decoding strategy's settings, :class:`~duet.asr.batching.OfflineBatching`).

With ``duet.cli.pipeline_options`` (the voice pipeline's own options, built on these into one ``PipelineSettings``),
the only library modules that read an ``argparse.Namespace``: entry scripts hand it to them once, and every
other module takes the typed settings. An option the chosen mode would ignore is an error naming it, never
silently dropped. The decoding options are derived from the registered strategies' settings dataclasses
(``duet.asr.decoding``): their fields, defaults, bounds and help are declared there alone.
"""

from __future__ import annotations

import argparse
import dataclasses

from duet.asr.batching import OfflineBatching
from duet.asr.decoding import (DecodingInputError, DecodingSettings, all_options, settings_from_values, strategies,
                               strategy_class)
from duet.asr.decoding.options import describe_rule, flag_of, kind_of
from duet.asr.onnx_engine import ENGINES
from duet.errors import AsrInputError
# --verbose/--log live below both packages (slm's scripts take them too); the tools import them from here
from duet.foundation.files import add_log_arguments, log_target  # noqa: F401

# OfflineBatching field -> its flag (the argparse attribute is the field's name); each script adds the fields it uses.
BATCHING_FLAGS = {"batch_size": "--batch-size", "workers": "--workers", "max_chunk_seconds": "--max-chunk-seconds"}
# tools/pipeline.py and tools/serve.py run a language model beside the ASR: their batch size says whose it is.
ASR_BATCHING_FLAGS = {**BATCHING_FLAGS, "batch_size": "--asr-batch-size"}
BATCHING_HELP = {
    "batch_size": "utterances (or pieces of a long recording) per ASR batch",
    "workers": "CPU: processes decoding whole batches at one thread each, or with --engine onnx threads each running "
               "a one-thread session (default: torch's thread count, i.e. OMP_NUM_THREADS or the physical cores; "
               "1 = one at a time in this process)",
    "max_chunk_seconds": "longest piece of a recording the ASR sees at once (longer ones are cut at pauses)",
}


def decoding_flags() -> dict[str, str]:
    """The number/path options of :func:`add_decoding_arguments`: settings field -> flag (the argparse attribute is
    the field's name), for every registered strategy's options."""
    return {name: flag_of(name, opt) for name, (_, opt, _) in all_options().items()}


def describe_decoding_source(args: argparse.Namespace, strategy_flag: str = "--decoding",
                             default: str | None = "greedy") -> str:
    """Where the decoding of an :func:`add_decoding_arguments` script came from: ``default`` when no option was
    given, else the options given (e.g. ``given: --decoding beam_lm --lm x.arpa``). ``default``: the strategy
    flag's default (None where the script resolves it itself), which is not counted as given."""
    flags = decoding_flags()
    given = [f"{flags[name]} {value}" for name, value in given_decoding_values(args).items()]
    if args.ctc_decoding not in (None, default):
        given.insert(0, f"{strategy_flag} {args.ctc_decoding}")
    return f"given: {' '.join(given)}" if given else "default"


def add_decoding_arguments(parser: argparse.ArgumentParser, strategy_flag: str = "--decoding",
                           strategy_default: str | None = None) -> None:
    """The CTC decoding options of an entry script: ``strategy_flag`` (one of the registered strategies) and one flag
    per option of any strategy, its help and default from the strategy's dataclass. Unset options stay ``None``, so
    that the settings hold the defaults. ``strategy_default`` describes a default the script resolves itself: the
    strategy is then ``None`` when the flag is left out."""
    group = parser.add_argument_group("CTC decoding")
    names = strategies()
    summaries = "; ".join(f"{name}: {strategy_class(name).summary}" for name in names)
    group.add_argument(strategy_flag, dest="ctc_decoding", choices=names,
                       default=None if strategy_default else "greedy",
                       help=f"{summaries} (default: {strategy_default or 'greedy'})")
    for name, (f, opt, readers) in all_options().items():
        kind = kind_of(f, opt)
        default = "" if f.default is None else f"; default: {f.default:g}" if kind is not str else f"; default: {f.default}"
        bounds = "" if kind is str or (opt.low is None and opt.high is None) else f"; {describe_rule(kind, opt)}"
        group.add_argument(flag_of(name, opt), dest=name, type=kind, default=None,
                           help=f"{opt.help} ({', '.join(readers)}{bounds}{default})")


def given_decoding_values(args: argparse.Namespace) -> dict:
    """The number/path options of :func:`add_decoding_arguments` given on the command line, by field name."""
    return {name: getattr(args, name) for name in decoding_flags() if getattr(args, name, None) is not None}


def decoding_settings_from_args(args: argparse.Namespace, strategy_flag: str = "--decoding",
                                streaming: bool = False) -> DecodingSettings:
    """The decoding settings from the options of :func:`add_decoding_arguments`, validated; an option the chosen
    strategy would ignore is a ``DecodingInputError`` naming it."""
    if args.ctc_decoding is None:  # add_decoding_arguments(strategy_default=...): the script resolves it first
        raise ValueError(f"{strategy_flag} was left for the script to resolve, and it did not")
    return decoding_settings_from_values(args.ctc_decoding, given_decoding_values(args), strategy_flag, streaming)


def decoding_settings_from_values(strategy: str, values: dict, strategy_flag: str = "--decoding",
                                  streaming: bool = False) -> DecodingSettings:
    """The settings of ``strategy`` with ``values`` (field name -> value, as the options of
    :func:`add_decoding_arguments` give them), validated; messages name the options."""
    if streaming and strategy != "greedy":
        raise DecodingInputError(f"--stream decodes greedily (NeMo's cache-aware step): "
                                 f"drop {strategy_flag} {strategy}")
    return settings_from_values(strategy, values, decoding_flags().__getitem__, strategy_flag)


def add_engine_argument(parser: argparse.ArgumentParser, model_flag: str = "--model") -> None:
    """``--engine``: the ASR model through PyTorch (NeMo) or through its ONNX export (tools/export_onnx.py)."""
    parser.add_argument("--engine", choices=ENGINES, default=ENGINES[0],
                        help=f"torch: the .nemo through NeMo/PyTorch; onnx: its export by tools/export_onnx.py, "
                             f"read from <stem>_onnx/ beside the .nemo or from {model_flag} given as that folder, "
                             f"with --int8 its int8 graph (default: {ENGINES[0]})")


def add_batching_arguments(parser: argparse.ArgumentParser, defaults: OfflineBatching,
                           fields: tuple[str, ...] = ("batch_size", "workers"),
                           flags: dict[str, str] = BATCHING_FLAGS, streaming: bool = False) -> None:
    """The options of offline transcription's batching: one per ``OfflineBatching`` field in ``fields``, spelt as
    ``flags`` says, its default shown from ``defaults``. They stay ``None`` when left out, so that
    :func:`offline_batching_from_args` can tell them from defaults (and, with ``streaming``, refuse them with
    ``--stream``)."""
    not_streaming = "; not with --stream" if streaming else ""
    for name in fields:
        default = getattr(defaults, name)
        shown = "" if name == "workers" else f" (default: {default:g}{not_streaming})"
        parser.add_argument(flags[name], dest=name, type=int if name != "max_chunk_seconds" else float, default=None,
                            help=BATCHING_HELP[name] + shown)


def offline_batching_from_args(args: argparse.Namespace, defaults: OfflineBatching,
                               flags: dict[str, str] = BATCHING_FLAGS, streaming: bool = False) -> OfflineBatching:
    """``defaults`` with the options of :func:`add_batching_arguments` given on the command line, validated
    (messages name them as ``flags`` spells them).

    Streaming runs one file at a time, whole, so with ``streaming`` any of them given is an ``AsrInputError``
    naming the flags instead of being silently ignored.
    """
    given = {name: getattr(args, name, None) for name in BATCHING_FLAGS}
    given = {name: value for name, value in given.items() if value is not None}
    if streaming and given:
        raise AsrInputError(f"{', '.join(flags[name] for name in given)} not used with --stream "
                            "(files stream one at a time, whole)")
    batching = dataclasses.replace(defaults, **given)
    batching.validate(names=flags)
    return batching
