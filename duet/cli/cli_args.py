"""The command line's boundary: the options entry scripts share (decoding, engine, batching, logging), the voice
pipeline's own (shared by ``tools/pipeline.py`` and ``tools/serve.py``), and their conversion into the library's typed
settings (a decoding strategy's settings, :class:`~duet.asr.batching.OfflineBatching`, one
:class:`~duet.pipeline.PipelineSettings`).

The only library module that reads an ``argparse.Namespace``: entry scripts hand it here once, and every other module
takes the typed settings. An option the chosen mode would ignore is an error naming it, never silently dropped. The
decoding options are derived from the registered strategies' settings dataclasses (``duet.asr.decoding``): their
fields, defaults, bounds and help are declared there alone.

A model's decoding is resolved here in one call, :func:`model_decoding_from_args`: the decoding options given and
the model's decoding.json, read once, become its typed settings, threshold and the line saying where they came from.
:func:`pipeline_settings_from_args` reads the pipeline's Namespace, takes the ASR decoding from that call and writes
nothing back onto the Namespace.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from duet.asr.batching import OfflineBatching
from duet.asr.confidence import DEFAULT_MIN_CONFIDENCE, NOT_UNDERSTOOD_REPLY, check_min_confidence
from duet.asr.decoding import (DecodingInputError, DecodingSettings, all_options, strategies,
                               strategy_class)
from duet.asr.decoding.file import SavedDecoding, decoding_file_for, read_decoding_file
from duet.asr.decoding.options import describe_rule, flag_of, kind_of
from duet.asr.onnx_engine import ENGINES
from duet.demo.models import DEMO_SLM_MODEL, WHISPER_SLM_MODEL
from duet.errors import AsrInputError, DuetError
from duet.foundation import EXPERIMENTS, python_command
# --verbose/--log live below both packages (slm's scripts take them too); the tools import them from here
from duet.foundation.files import add_log_arguments, log_target  # noqa: F401
from duet.io import shown_path
from duet.pipeline import PipelineSettings
from slm.generation import GenerationSettingsError, add_generation_arguments, generation_settings_from_args

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


def describe_given(strategy: str | None, given: dict, strategy_flag: str) -> str:
    """``default`` when no decoding option was given, else the options given (e.g. ``given: --decoding beam_lm --lm
    x.arpa``): ``strategy`` (None: not given) and the values ``given`` (field name -> value)."""
    flags = decoding_flags()
    options = [f"{flags[name]} {value}" for name, value in given.items()]
    if strategy is not None:
        options.insert(0, f"{strategy_flag} {strategy}")
    return f"given: {' '.join(options)}" if options else "default"


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
    return strategy_class(strategy, strategy_flag).from_values(values, decoding_flags().__getitem__, strategy_flag)


@dataclasses.dataclass(frozen=True)
class ModelDecoding:
    """How a model decodes once its decoding.json and the options given are merged."""

    settings: DecodingSettings
    source: str | None  # the decoding.json it came from (and the options given over it); None: the options alone
    min_confidence: float  # the model's low-confidence threshold under this decoding (module doc of decoding.file)
    origin: str  # where it came from, as the pipeline's first line says: from <file>, (given: ...), (default: ...)

    def describe(self) -> str:
        """The decoding and where it came from: ``beam8+LM(a=1.1,b=4) from experiments/demo_asr/decoding.json``,
        ``greedy (default: no <model folder>/decoding.json)``."""
        return f"{self.settings.describe()} {self.origin}"


def model_decoding_from_args(args: argparse.Namespace, asr_model: Path, stream: bool = False,
                             min_confidence: float | None = None,
                             strategy_flag: str = "--asr-decoding") -> ModelDecoding:
    """The decoding of ``asr_model`` from the options of :func:`add_decoding_arguments` (``strategy_default`` given:
    the strategy is None when left out) and the model's decoding.json: :func:`resolve_asr_decoding`."""
    return resolve_asr_decoding(asr_model, args.ctc_decoding, given_decoding_values(args), stream, min_confidence,
                                strategy_flag)


def resolve_asr_decoding(asr_model: Path, strategy: str | None, given: dict, stream: bool = False,
                         min_confidence: float | None = None, strategy_flag: str = "--asr-decoding") -> ModelDecoding:
    """The decoding of ``asr_model``: ``strategy`` (None: left unsaid) and the values ``given`` on the command line
    (settings field -> value, :func:`given_decoding_values`) merged with the model's decoding.json, read once.
    Messages name the options (``strategy_flag`` for the strategy).

    Without a strategy (or with the one the file names) and without ``--lm``, the file is used, each value given
    replacing its own. ``--lm`` alone means beam_lm with that LM at the library's weights (the file's were tuned for
    its own LM). No file, and ``stream``: greedy. Beam options that greedy by default would ignore are a
    ``DecodingInputError`` saying why.

    ``min_confidence`` (``--min-confidence``; None: left unsaid) is the threshold when given; else the file's
    ``min_confidence`` when the file's decoding is the one used (the threshold was chosen for it), else
    DEFAULT_MIN_CONFIDENCE."""
    saved_path = decoding_file_for(asr_model)
    file_may_apply = not stream and strategy != "greedy" and "ngram_lm" not in given
    saved = read_decoding_file(saved_path) if file_may_apply and saved_path.is_file() else None
    given_line = describe_given(strategy, given, strategy_flag)
    settings, source, file_used = _merged_decoding(saved, saved_path, strategy, given, stream, strategy_flag)
    if min_confidence is None:
        from_file = saved.min_confidence if file_used else None
        min_confidence = DEFAULT_MIN_CONFIDENCE if from_file is None else from_file
    if source:
        origin = f"from {source}"
    elif stream:
        origin = "(--stream decodes greedily)"
    elif given_line != "default":
        origin = f"({given_line})"
    else:
        origin = f"(default: {saved_path} says greedy)" if saved is not None else f"(default: no {saved_path})"
    return ModelDecoding(settings, source, min_confidence, origin)


def _merged_decoding(saved: SavedDecoding | None, saved_path: Path, strategy: str | None, given: dict, stream: bool,
                     strategy_flag: str) -> tuple[DecodingSettings, str | None, bool]:
    """:func:`resolve_asr_decoding`'s decoding part: the settings, their source, and whether the model decodes as its
    decoding.json says (also when the file says greedy, which names no source)."""
    chosen, values, source, file_used = strategy, given, None, False
    if stream:  # streaming decodes greedily; decoding_settings_from_values names any option it would ignore
        chosen = strategy or "greedy"
    elif "ngram_lm" in given:
        chosen = strategy or "beam_lm"
    else:
        flags = [decoding_flags()[name] for name in given]
        said = saved.settings if saved is not None else None
        if said is not None and said.strategy != "greedy" and strategy in (None, said.strategy):
            chosen, values, file_used = said.strategy, {**said.used_values(), **given}, True
            source = f"{saved_path}, {', '.join(flags)} given" if flags else str(saved_path)
        elif strategy is None:
            if given:
                why = f"{saved_path} says greedy" if said is not None else f"there is no {saved_path}"
                others = [s for s in strategies() if s != "greedy"]
                raise DecodingInputError(f"{', '.join(flags)} needs {strategy_flag} {' or '.join(others)}: this "
                                         f"model decodes greedily by default ({why})")
            chosen, file_used = "greedy", said is not None  # a file that says greedy: the model decodes as it says
    return decoding_settings_from_values(chosen, values, strategy_flag, streaming=stream), source, file_used


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


# The voice pipeline's options, shared by tools/pipeline.py and tools/serve.py so that both answer with the same models,
# the same ASR decoding (the decoding.json beside the model included) and the same language-model decoding.

# the models, batching and thresholds an option left out stands for
PIPELINE_DEFAULTS = PipelineSettings()


def add_model_arguments(parser: argparse.ArgumentParser, streaming: bool = False) -> None:
    """``--asr-model``, ``--engine``, ``--int8``, ``--slm-model``, ``--asr-batch-size``, ``--max-chunk-seconds``,
    ``--trim-silence`` and ``--min-confidence`` (``streaming``: the script also has ``--stream``, which the batch
    options do not go with)."""
    not_streaming = "; not with --stream" if streaming else ""
    parser.add_argument("--asr-model", type=Path, default=PIPELINE_DEFAULTS.asr_model, help="NeMo .nemo file")
    add_engine_argument(parser, "--asr-model")
    parser.add_argument("--int8", action="store_true", help="--engine onnx: the export's int8 graph")
    parser.add_argument("--slm-model", type=Path, default=PIPELINE_DEFAULTS.slm_model,
                        help=f"Hugging Face model folder (default: {shown_path(WHISPER_SLM_MODEL)} once "
                             f"slm/finetune.py --config-name slm_whisper_offline has made it, else "
                             f"{shown_path(DEMO_SLM_MODEL)}, the demo's)")
    add_batching_arguments(parser, PIPELINE_DEFAULTS.batching, ("batch_size", "max_chunk_seconds"),
                           ASR_BATCHING_FLAGS, streaming=streaming)
    parser.add_argument("--trim-silence", type=float, default=None, metavar="SECONDS",
                        help="the ASR hears each recording from SECONDS before its first speech to SECONDS after its "
                             "last, as Silero VAD hears it (a recording without speech whole; e.g. 0.5; default: all "
                             f"of it{not_streaming}); see RESULTS.md, 'Silence around a recording'")
    parser.add_argument("--min-confidence", type=float, default=None, metavar="C",
                        help="a transcript whose confidence (its mean word confidence, duet/asr/confidence.py) is below C "
                             f"is not understood: answered {NOT_UNDERSTOOD_REPLY!r} without asking the language model; "
                             "0 turns the check off (default: the min_confidence of the ASR model's decoding file "
                             "(<stem>.decoding.json beside it, else decoding.json in its folder) when the model "
                             "decodes as that file says (the demo writes one, the Whisper base has one), else "
                             f"{DEFAULT_MIN_CONFIDENCE:g}, chosen for the FastConformer base checkpoint; "
                             "bench/confidence_threshold.py chooses one for a model)"
                             + ("; --stream gives no word confidences, so its transcripts are never checked"
                                if streaming else ""))


def add_decoding_options(parser: argparse.ArgumentParser, streaming: bool = False) -> None:
    """The ASR decoding options (defaulting to the model folder's decoding.json) and the language model's."""
    add_decoding_arguments(parser, "--asr-decoding", strategy_default=(
        "the ASR model's decoding file (<stem>.decoding.json beside it, else decoding.json in its folder; the demo "
        "writes one), each option given replacing its "
        f"value; with --lm: beam_lm; with {'--stream or ' if streaming else ''}no such file: greedy"))
    add_generation_arguments(parser)


def model_path_problems(asr_model: Path, slm_model: Path) -> list[str]:
    """A line for each ``--asr-model``/``--slm-model`` that does not exist, saying how to get the demo's, or naming
    the newest model the recipes wrote (nemo_recipes/finetune_ctc.py, slm/finetune.py) to pass instead."""
    problems = []
    for flag, path, made in (("--asr-model", asr_model, newest_recipe_asr_model),
                             ("--slm-model", slm_model, newest_recipe_slm_model)):
        if not path.exists():
            found = made()
            instead = f"{flag} {shown_path(found)}" if found else flag
            problems.append(f"{flag} {path} does not exist (run {python_command('tools/demo.py')} first, or pass "
                            f"{instead})")
    return problems


def check_model_paths(asr_model: Path, slm_model: Path) -> None:
    """A missing ``--asr-model``/``--slm-model`` is a one-line error (:func:`model_path_problems`)."""
    problems = model_path_problems(asr_model, slm_model)
    if problems:
        raise DuetError("; ".join(problems))


def newest_recipe_asr_model() -> Path | None:
    """The newest ``experiments/<name>/<name>.nemo`` that nemo_recipes/finetune_ctc.py saved, if any."""
    return _newest(p for p in EXPERIMENTS.glob("*/*.nemo") if p.stem == p.parent.name)


def newest_recipe_slm_model() -> Path | None:
    """The newest model folder slm/finetune.py finished (its output_dir holds metrics.json), if any."""
    return _newest(p.parent for p in EXPERIMENTS.glob("*/metrics.json")
                   if (p.parent / "config.json").is_file())


def _newest(paths) -> Path | None:
    return max(paths, key=lambda p: p.stat().st_mtime, default=None)


def pipeline_settings_from_args(args: argparse.Namespace) -> tuple[PipelineSettings, str]:
    """Check every option and resolve the ASR decoding: the pipeline's settings and a line saying which decoding
    the ASR uses and where it came from (``decoding: beam8+LM(a=1.1,b=4) from experiments/demo_asr/decoding.json``,
    ``decoding: greedy (default: no <model folder>/decoding.json)``).

    Bad options fail here, before anything loads, named by their flag."""
    stream = getattr(args, "stream", False)
    if args.int8 and args.engine != "onnx":
        raise DuetError("--int8 needs --engine onnx (int8 is the ONNX export's graph)")
    if args.min_confidence is not None:  # given: checked before anything else (else the model's own applies)
        check_min_confidence(args.min_confidence)
    if args.trim_silence is not None and (args.trim_silence < 0 or stream):
        raise DuetError(f"--trim-silence {args.trim_silence:g}: " + ("not used with --stream (a live stream is not "
                        "trimmed)" if stream else "must be >= 0"))
    try:
        generation = generation_settings_from_args(args)  # bad language-model options fail here, before loading
    except GenerationSettingsError as e:
        raise DuetError(f"language model decoding: {e}") from e
    decoding = model_decoding_from_args(args, args.asr_model, stream, args.min_confidence)
    batching = offline_batching_from_args(args, PIPELINE_DEFAULTS.batching, ASR_BATCHING_FLAGS, streaming=stream)
    settings = PipelineSettings(asr_model=args.asr_model, slm_model=args.slm_model, engine=args.engine,
                                int8=args.int8, stream=stream, asr_decoding=decoding.settings,
                                asr_decoding_source=decoding.source, batching=batching, generation=generation,
                                trim_silence_s=args.trim_silence, min_confidence=decoding.min_confidence)
    return settings.validate(), f"decoding: {decoding.describe()}"
