"""Command-line options that several entry scripts share, and their conversion into the library's typed
settings (:class:`~duet.asr.decoding.DecodingSettings`, :class:`~duet.asr.batching.OfflineBatching`).

With ``duet.cli.pipeline_options`` (the voice pipeline's own options, built on these into one ``PipelineSettings``),
the only library modules that read an ``argparse.Namespace``: entry scripts hand it to them once, and every
other module takes the typed settings. An option the chosen mode would ignore is an error naming it, never
silently dropped; which options each decoding strategy reads is ``duet.asr.decoding.STRATEGY_FIELDS``.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from duet.asr.batching import OfflineBatching
from duet.asr.decoding import STRATEGIES, DecodingInputError, DecodingSettings, ignored_fields
from duet.asr.onnx_engine import ENGINES
from duet.errors import AsrInputError
from duet.foundation import EXPERIMENTS, REPO_ROOT

# The number/path options of add_decoding_arguments: DecodingSettings field -> flag (the argparse attribute is the
# field's name). Which of them each strategy reads is duet.asr.decoding.STRATEGY_FIELDS.
DECODING_FLAGS = {"beam_size": "--beam-size", "ngram_lm": "--lm", "alpha": "--alpha", "beta": "--beta",
                  "whisper_weight": "--whisper-weight", "whisper_beam": "--whisper-beam", "ctc_weight": "--ctc-weight",
                  "lm_weight": "--lm-weight", "token_bonus": "--token-bonus", "whisper_sure": "--whisper-sure",
                  "spoken_share": "--spoken-share"}
# Where a tool's library output (NeMo, Lightning, transformers, warnings) goes without --verbose: <tool>.log here.
LOG_DIR = EXPERIMENTS / "logs"
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
    given = [f"{DECODING_FLAGS[name]} {value}" for name, value in given_decoding_values(args).items()]
    if args.ctc_decoding not in (None, default):
        given.insert(0, f"{strategy_flag} {args.ctc_decoding}")
    return f"given: {' '.join(given)}" if given else "default"


def add_decoding_arguments(parser: argparse.ArgumentParser, strategy_flag: str = "--decoding",
                           strategy_default: str | None = None) -> None:
    """The CTC decoding options of an entry script: ``strategy_flag`` (greedy/beam/beam_lm), ``--beam-size``,
    ``--lm``, ``--alpha``, ``--beta``, ``--whisper-weight``. Unset numbers stay ``None`` so that
    ``DecodingSettings`` holds the defaults.
    ``strategy_default`` describes a default the script resolves itself: the strategy is then ``None`` when
    the flag is left out."""
    d = DecodingSettings
    group = parser.add_argument_group("CTC decoding")
    group.add_argument(strategy_flag, dest="ctc_decoding", choices=STRATEGIES,
                       default=None if strategy_default else d.strategy,
                       help=f"greedy, beam search, beam search + token n-gram LM, or joint: Whisper tiny.en's beam "
                            f"search proposes beside that beam and the CTC model judges "
                            f"(default: {strategy_default or d.strategy})")
    group.add_argument("--beam-size", type=int, default=None, help=f"beam width (default: {d.beam_size})")
    group.add_argument("--lm", dest="ngram_lm", default=None,
                       help="token ARPA for beam_lm (tools/train_ngram_lm.py --unit token, the model's tokenizer)")
    group.add_argument("--alpha", type=float, default=None, help=f"LM weight, beam_lm only (default: {d.alpha:g})")
    group.add_argument("--beta", type=float, default=None,
                       help=f"bonus per emitted token, beam and beam_lm (default: {d.beta:g})")
    group.add_argument("--whisper-weight", type=float, default=None,
                       help="Whisper tiny.en's decoder rescores the beam's candidates with the audio, its "
                            "log-likelihood at this weight, beam and beam_lm (default: 0, off; adds ~0.1-0.2 s to a "
                            "5 s clip on one thread)")
    group.add_argument("--whisper-beam", type=int, default=None,
                       help=f"joint: Whisper's beam width and n-best (default: {d.whisper_beam})")
    group.add_argument("--ctc-weight", type=float, default=None,
                       help=f"joint: weight of the CTC log-likelihood of a candidate (default: {d.ctc_weight:g})")
    group.add_argument("--lm-weight", type=float, default=None,
                       help=f"joint: weight of the n-gram LM's log-probability of a candidate (default: {d.lm_weight:g})")
    group.add_argument("--token-bonus", type=float, default=None,
                       help=f"joint: bonus per CTC token of a candidate (default: {d.token_bonus:g})")
    group.add_argument("--whisper-sure", type=float, default=None,
                       help="joint: keep Whisper's first hypothesis unjudged when its log-likelihood per written word "
                            f"is above this (<= 0; default: {d.whisper_sure:g}, always judged)")
    group.add_argument("--spoken-share", type=float, default=None,
                       help="joint: the share (0..1) of Whisper's log-likelihood read from a candidate's spoken form "
                            f"rather than as written (default: {d.spoken_share:g})")


def given_decoding_values(args: argparse.Namespace) -> dict:
    """The number/path options of :func:`add_decoding_arguments` given on the command line, by field name."""
    return {name: getattr(args, name) for name in DECODING_FLAGS if getattr(args, name) is not None}


def decoding_settings_from_args(args: argparse.Namespace, strategy_flag: str = "--decoding",
                                streaming: bool = False) -> DecodingSettings:
    """``DecodingSettings`` from the options of :func:`add_decoding_arguments`, validated; an option the chosen
    strategy would ignore is a ``DecodingInputError`` naming it."""
    if args.ctc_decoding is None:  # add_decoding_arguments(strategy_default=...): the script resolves it first
        raise ValueError(f"{strategy_flag} was left for the script to resolve, and it did not")
    return decoding_settings_from_values(args.ctc_decoding, given_decoding_values(args), strategy_flag, streaming)


def decoding_settings_from_values(strategy: str, values: dict, strategy_flag: str = "--decoding",
                                  streaming: bool = False) -> DecodingSettings:
    """``DecodingSettings`` of ``strategy`` with ``values`` (field name -> value, as the options of
    :func:`add_decoding_arguments` give them), validated; messages name the options."""
    if streaming and strategy != "greedy":
        raise DecodingInputError(f"--stream decodes greedily (NeMo's cache-aware step): "
                                 f"drop {strategy_flag} {strategy}")
    ignored = ignored_fields(strategy, values)
    if ignored:
        flags = [flag for name, flag in DECODING_FLAGS.items() if name in ignored]
        raise DecodingInputError(f"{', '.join(flags)} not used by {strategy_flag} {strategy}")
    if strategy == "beam_lm" and not values.get("ngram_lm"):
        raise DecodingInputError(f"{strategy_flag} beam_lm needs --lm <token ARPA> "
                                 "(tools/train_ngram_lm.py --unit token)")
    settings = DecodingSettings(strategy, **values)
    settings.validate()
    return settings


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
