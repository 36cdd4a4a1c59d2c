"""Command-line options that several entry scripts share, and their conversion into the library's typed
settings (:class:`~duet.asr.decoding.DecodingSettings`, :class:`~duet.asr.batching.OfflineBatching`).

The one library module that reads an ``argparse.Namespace``; every other module takes the settings. An
option the chosen mode would ignore is an error naming it, never silently dropped.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from duet.asr.batching import OfflineBatching
from duet.asr.decoding import STRATEGIES, DecodingInputError, DecodingSettings
from duet.asr.onnx_engine import ENGINES
from duet.errors import AsrInputError
from duet.foundation import EXPERIMENTS, REPO_ROOT

# The number/path options of add_decoding_arguments and the argparse attributes they land in.
DECODING_OPTIONS = (("--beam-size", "beam_size"), ("--lm", "lm"), ("--alpha", "alpha"), ("--beta", "beta"))
# Where a tool's library output (NeMo, Lightning, transformers, warnings) goes without --verbose: <tool>.log here.
LOG_DIR = EXPERIMENTS / "logs"
# OfflineBatching field -> option of add_batching_arguments.
BATCHING_OPTIONS = {"batch_size": "--batch-size", "workers": "--workers"}


def add_log_arguments(parser: argparse.ArgumentParser, tool: str) -> None:
    """``--verbose`` and ``--log``: the libraries' log lines go to a file unless ``--verbose`` shows them (on standard
    error); the tool's own lines stay on the console either way (``duet.io.library_output_to``)."""
    default = LOG_DIR / f"{tool}.log"
    parser.add_argument("--verbose", action="store_true",
                        help="show NeMo's, Lightning's and transformers' log lines and warnings (on standard error) "
                             "instead of writing them to --log")
    parser.add_argument("--log", type=Path, default=default,
                        help=f"where those lines go, this run's only (default: {default.relative_to(REPO_ROOT)} in the "
                             "repository)")


def log_target(args: argparse.Namespace) -> Path | None:
    """The file for ``duet.io.library_output_to``: ``--log``, or None with ``--verbose``."""
    return None if args.verbose else args.log


def describe_decoding_source(args: argparse.Namespace, strategy_flag: str = "--decoding",
                             default: str | None = DecodingSettings.strategy) -> str:
    """Where the decoding of an :func:`add_decoding_arguments` script came from: ``default`` when no option was
    given, else the options given (e.g. ``given: --decoding beam_lm --lm x.arpa``). ``default``: the strategy
    flag's default (None where the script resolves it itself), which is not counted as given."""
    given = [f"{flag} {getattr(args, attr)}" for flag, attr in DECODING_OPTIONS if getattr(args, attr) is not None]
    if args.ctc_decoding not in (None, default):
        given.insert(0, f"{strategy_flag} {args.ctc_decoding}")
    return f"given: {' '.join(given)}" if given else "default"


def add_decoding_arguments(parser: argparse.ArgumentParser, strategy_flag: str = "--decoding",
                           strategy_default: str | None = None) -> None:
    """The CTC decoding options of an entry script: ``strategy_flag`` (greedy/beam/beam_lm), ``--beam-size``,
    ``--lm``, ``--alpha``, ``--beta``. Unset numbers stay ``None`` so that ``DecodingSettings`` holds the defaults.
    ``strategy_default`` describes a default the script resolves itself: the strategy is then ``None`` when
    the flag is left out."""
    d = DecodingSettings
    group = parser.add_argument_group("CTC decoding")
    group.add_argument(strategy_flag, dest="ctc_decoding", choices=STRATEGIES,
                       default=None if strategy_default else d.strategy,
                       help=f"greedy, beam search, or beam search + token n-gram LM "
                            f"(default: {strategy_default or d.strategy})")
    group.add_argument("--beam-size", type=int, default=None, help=f"beam width (default: {d.beam_size})")
    group.add_argument("--lm", default=None,
                       help="token ARPA for beam_lm (tools/train_ngram_lm.py --unit token, the model's tokenizer)")
    group.add_argument("--alpha", type=float, default=None, help=f"LM weight, beam_lm only (default: {d.alpha:g})")
    group.add_argument("--beta", type=float, default=None,
                       help=f"bonus per emitted token, beam and beam_lm (default: {d.beta:g})")


def decoding_settings_from_args(args: argparse.Namespace, strategy_flag: str = "--decoding",
                                streaming: bool = False) -> DecodingSettings:
    """``DecodingSettings`` from the options of :func:`add_decoding_arguments`, validated; an option the chosen
    strategy would ignore is a ``DecodingInputError`` naming it."""
    strategy = args.ctc_decoding
    if strategy is None:  # add_decoding_arguments(strategy_default=...): the script resolves it first
        raise ValueError(f"{strategy_flag} was left for the script to resolve, and it did not")
    given = {name: getattr(args, attr) for name, attr in DECODING_OPTIONS}
    used = {"greedy": (), "beam": ("--beam-size", "--beta"), "beam_lm": ("--beam-size", "--lm", "--alpha", "--beta")}
    ignored = [name for name, value in given.items() if value is not None and name not in used[strategy]]
    if streaming and strategy != "greedy":
        raise DecodingInputError(f"--stream decodes greedily (NeMo's cache-aware step): "
                                 f"drop {strategy_flag} {strategy}")
    if ignored:
        raise DecodingInputError(f"{', '.join(ignored)} not used by {strategy_flag} {strategy}")
    if strategy == "beam_lm" and not args.lm:
        raise DecodingInputError(f"{strategy_flag} beam_lm needs --lm <token ARPA> "
                                 "(tools/train_ngram_lm.py --unit token)")
    values = {"beam_size": args.beam_size, "ngram_lm": args.lm, "alpha": args.alpha, "beta": args.beta}
    settings = DecodingSettings(strategy, **{k: v for k, v in values.items() if v is not None})
    settings.validate()
    return settings


def add_engine_argument(parser: argparse.ArgumentParser, model_flag: str = "--model") -> None:
    """``--engine``: the ASR model through PyTorch (NeMo) or through its ONNX export (tools/export_onnx.py)."""
    parser.add_argument("--engine", choices=ENGINES, default=ENGINES[0],
                        help=f"torch: the .nemo through NeMo/PyTorch; onnx: its export by tools/export_onnx.py, "
                             f"read from <stem>_onnx/ beside the .nemo or from {model_flag} given as that folder, "
                             f"with --int8 its int8 graph (default: {ENGINES[0]})")


def add_batching_arguments(parser: argparse.ArgumentParser, batch_size: int, streaming: bool = False) -> None:
    """``--batch-size`` (default ``batch_size``) and ``--workers`` of offline transcription. Both stay ``None``
    when left out, so that :func:`offline_batching_from_args` can tell them from defaults (and, with
    ``streaming``, refuse them with ``--stream``)."""
    parser.add_argument("--batch-size", type=int, default=None,
                        help=f"utterances per batch (default: {batch_size}{'; not with --stream' if streaming else ''})")
    parser.add_argument("--workers", type=int, default=None,
                        help="CPU: processes decoding whole batches at one thread each, or with --engine onnx threads "
                             "each running a one-thread session (default: torch's thread count, i.e. "
                             "OMP_NUM_THREADS or the physical cores; 1 = one at a time in this process)")


def offline_batching_from_args(args: argparse.Namespace, defaults: OfflineBatching,
                               options: dict[str, str] | None = None, streaming: bool = False) -> OfflineBatching:
    """``defaults`` with the options given on the command line, validated (messages name the options).

    ``options``: ``OfflineBatching`` field -> its flag (default :data:`BATCHING_OPTIONS`); the argparse
    attribute is the flag's name. Streaming runs one file at a time, whole, so with ``streaming`` any of
    them given is an ``AsrInputError`` naming the flags instead of being silently ignored.
    """
    options = options or BATCHING_OPTIONS
    given = {field: getattr(args, flag.lstrip("-").replace("-", "_")) for field, flag in options.items()}
    given = {field: value for field, value in given.items() if value is not None}
    if streaming and given:
        raise AsrInputError(f"{', '.join(options[f] for f in given)} not used with --stream "
                            "(files stream one at a time, whole)")
    batching = dataclasses.replace(defaults, **given)
    batching.validate(names=options)
    return batching
