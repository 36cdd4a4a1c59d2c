"""The voice pipeline's command-line options and how they become a loaded :class:`~duet.pipeline.VoicePipeline`,
shared by ``tools/pipeline.py`` and ``tools/serve.py`` so that both answer with the same models, the same ASR
decoding (the ``decoding.json`` beside the model included) and the same language-model decoding.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from duet.asr.batching import OfflineBatching
from duet.asr.decoding import DecodingInputError
from duet.cli_args import (
    DECODING_OPTIONS,
    add_decoding_arguments,
    add_engine_argument,
    decoding_settings_from_args,
    describe_decoding_source,
    offline_batching_from_args,
)
from duet.confidence import DEFAULT_MIN_CONFIDENCE, NOT_UNDERSTOOD_REPLY, check_min_confidence
from duet.decoding_file import USED, decoding_file_for, read_decoding_file, read_min_confidence
from duet.demo_models import DEMO_ASR_MODEL, DEMO_SLM_MODEL
from duet.errors import DuetError
from duet.io import shown_path
from duet.pipeline import VoicePipeline
from duet.foundation import EXPERIMENTS
from slm.generation import GenerationSettingsError, add_generation_arguments, generation_settings_from_args

DEFAULT_ASR_MODEL = DEMO_ASR_MODEL
DEFAULT_SLM_MODEL = DEMO_SLM_MODEL
# batching of the offline ASR: --asr-batch-size, --max-chunk-seconds
DEFAULT_BATCHING = OfflineBatching(batch_size=8, max_chunk_seconds=20.0)
BATCHING_OPTIONS = {"batch_size": "--asr-batch-size", "max_chunk_seconds": "--max-chunk-seconds"}


def add_model_arguments(parser: argparse.ArgumentParser, streaming: bool = False) -> None:
    """``--asr-model``, ``--engine``, ``--int8``, ``--slm-model``, ``--asr-batch-size``, ``--max-chunk-seconds`` and
    ``--min-confidence`` (``streaming``: the script also has ``--stream``, which the batch options do not go with)."""
    not_streaming = "; not with --stream" if streaming else ""
    parser.add_argument("--asr-model", type=Path, default=DEFAULT_ASR_MODEL, help="NeMo .nemo file")
    add_engine_argument(parser, "--asr-model")
    parser.add_argument("--int8", action="store_true", help="--engine onnx: the export's int8 graph")
    parser.add_argument("--slm-model", type=Path, default=DEFAULT_SLM_MODEL, help="Hugging Face model folder")
    parser.add_argument("--asr-batch-size", type=int, default=None,
                        help=f"pieces of audio per ASR batch (default: {DEFAULT_BATCHING.batch_size}{not_streaming})")
    parser.add_argument("--trim-silence", type=float, default=None, metavar="SECONDS",
                        help="the ASR hears each recording from SECONDS before its first speech to SECONDS after its "
                             "last, as Silero VAD hears it (a recording without speech whole; e.g. 0.2; default: all "
                             f"of it{not_streaming}); see RESULTS.md, 'Silence around a recording'")
    parser.add_argument("--max-chunk-seconds", type=float, default=None,
                        help=f"longest piece the ASR sees at once (default: {DEFAULT_BATCHING.max_chunk_seconds:g}"
                             f"{not_streaming})")
    parser.add_argument("--min-confidence", type=float, default=None, metavar="C",
                        help="a transcript whose confidence (its mean word confidence, duet/confidence.py) is below C "
                             f"is not understood: answered {NOT_UNDERSTOOD_REPLY!r} without asking the language model; "
                             "0 turns the check off (default: the min_confidence of the decoding.json in the ASR "
                             "model's folder when the model decodes as that file says (the demo writes one), else "
                             f"{DEFAULT_MIN_CONFIDENCE:g}, chosen for the bundled base checkpoint; "
                             "bench/confidence_threshold.py chooses one for a model)"
                             + ("; --stream gives no word confidences, so its transcripts are never checked"
                                if streaming else ""))


def add_decoding_options(parser: argparse.ArgumentParser, streaming: bool = False) -> None:
    """The ASR decoding options (defaulting to the model folder's decoding.json) and the language model's."""
    add_decoding_arguments(parser, "--asr-decoding", strategy_default=(
        "the decoding.json in the ASR model's folder (the demo writes one), each option given replacing its "
        f"value; with --lm: beam_lm; with {'--stream or ' if streaming else ''}no such file: greedy"))
    add_generation_arguments(parser)


def model_path_problems(args: argparse.Namespace) -> list[str]:
    """A line for each ``--asr-model``/``--slm-model`` that does not exist, saying how to get the demo's, or naming
    the newest model the recipes wrote (nemo_recipes/finetune_ctc.py, slm/finetune.py) to pass instead."""
    problems = []
    for flag, path, made in (("--asr-model", args.asr_model, newest_recipe_asr_model),
                             ("--slm-model", args.slm_model, newest_recipe_slm_model)):
        if not path.exists():
            found = made()
            instead = f"{flag} {shown_path(found)}" if found else flag
            problems.append(f"{flag} {path} does not exist (run python tools/demo.py first, or pass {instead})")
    return problems


def check_model_paths(args: argparse.Namespace) -> None:
    """A missing ``--asr-model``/``--slm-model`` is a one-line error (:func:`model_path_problems`)."""
    problems = model_path_problems(args)
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


def resolve_asr_decoding(args: argparse.Namespace) -> str | None:
    """Fill in the ASR decoding left unsaid; returns the decoding.json it came from (and the options given over
    it), or None when the options alone decide.

    Without --asr-decoding (or with the strategy the file names) and without --lm, the decoding.json in the
    model's folder is used, each option given replacing its value. ``--lm`` alone means beam_lm with that LM at
    the library's weights (the file's were tuned for its own LM). No file, and ``--stream`` (``args.stream`` of
    a script that has it): greedy. Beam options that greedy by default would ignore are a
    ``DecodingInputError`` saying why.

    ``args.min_confidence`` (``--min-confidence``) left unsaid is filled in too: the file's ``min_confidence``
    when the file's decoding is the one used (the threshold was chosen for it), else DEFAULT_MIN_CONFIDENCE."""
    source, file_used = _resolve_decoding(args)
    if getattr(args, "min_confidence", None) is None:
        from_file = read_min_confidence(decoding_file_for(args.asr_model)) if file_used else None
        args.min_confidence = DEFAULT_MIN_CONFIDENCE if from_file is None else from_file
    return source


def _resolve_decoding(args: argparse.Namespace) -> tuple[str | None, bool]:
    """:func:`resolve_asr_decoding`'s decoding part: its return value, and whether the model decodes as its
    decoding.json says (also when the file says greedy, which names no source)."""
    # streaming decodes greedily; decoding_settings_from_args names any option it would ignore
    if getattr(args, "stream", False):
        args.ctc_decoding = args.ctc_decoding or "greedy"
        return None, False
    if args.lm is not None:
        args.ctc_decoding = args.ctc_decoding or "beam_lm"
        return None, False
    saved_path = decoding_file_for(args.asr_model)
    saved = (read_decoding_file(saved_path) if args.ctc_decoding in (None, "beam", "beam_lm") and saved_path.is_file()
             else None)
    given = [flag for flag, attr in DECODING_OPTIONS if getattr(args, attr) is not None]
    if saved is not None and saved.strategy != "greedy" and args.ctc_decoding in (None, saved.strategy):
        args.ctc_decoding = saved.strategy
        values = {"beam_size": saved.beam_size, "lm": saved.ngram_lm, "alpha": saved.alpha, "beta": saved.beta}
        for attr, value in values.items():
            if getattr(args, attr) is None and attr in USED[saved.strategy]:
                setattr(args, attr, value)
        return f"{saved_path}, {', '.join(given)} given" if given else str(saved_path), True
    if args.ctc_decoding is None:
        args.ctc_decoding = "greedy"
        if given:
            why = f"{saved_path} says greedy" if saved is not None else f"there is no {saved_path}"
            raise DecodingInputError(f"{', '.join(given)} needs --asr-decoding beam or beam_lm: this model "
                                     f"decodes greedily by default ({why})")
        return None, saved is not None  # a file that says greedy: the model decodes as it says
    return None, False


def resolve_pipeline_options(args: argparse.Namespace) -> tuple[dict, str]:
    """Check every option and resolve the ASR decoding: the keyword arguments of ``VoicePipeline.load`` and a line
    saying which decoding the ASR uses and where it came from (``decoding: beam16+LM(a=0.8,b=4) from
    experiments/demo_asr/decoding.json``, ``decoding: greedy (default: no <model folder>/decoding.json)``).

    Bad options fail here, before anything loads, named by their flag."""
    stream = getattr(args, "stream", False)
    if args.int8 and args.engine != "onnx":
        raise DuetError("--int8 needs --engine onnx (int8 is the ONNX export's graph)")
    if args.min_confidence is not None:  # given: checked before anything else (resolve_asr_decoding fills it in)
        check_min_confidence(args.min_confidence)
    if args.trim_silence is not None and (args.trim_silence < 0 or stream):
        raise DuetError(f"--trim-silence {args.trim_silence:g}: " + ("not used with --stream (a live stream is not "
                        "trimmed)" if stream else "must be >= 0"))
    try:
        generation = generation_settings_from_args(args)  # bad language-model options fail here, before loading
    except GenerationSettingsError as e:
        raise DuetError(f"language model decoding: {e}") from e
    given = describe_decoding_source(args, "--asr-decoding", default=None)  # before the file fills the rest in
    asr_decoding_source = resolve_asr_decoding(args)
    asr_decoding = decoding_settings_from_args(args, "--asr-decoding", streaming=stream)
    batching = offline_batching_from_args(args, DEFAULT_BATCHING, BATCHING_OPTIONS, streaming=stream)
    saved_path = decoding_file_for(args.asr_model)
    if asr_decoding_source:
        origin = f"from {asr_decoding_source}"
    elif stream:
        origin = "(--stream decodes greedily)"
    elif given != "default":
        origin = f"({given})"
    else:
        origin = f"(default: {saved_path} says greedy)" if saved_path.is_file() else f"(default: no {saved_path})"
    options = dict(asr_path=args.asr_model, slm_path=args.slm_model, generation=generation,
                   max_chunk_s=batching.max_chunk_seconds, asr_batch_size=batching.batch_size,
                   asr_decoding=asr_decoding, asr_decoding_source=asr_decoding_source, stream=stream,
                   engine=args.engine, int8=args.int8, trim_silence_s=args.trim_silence,
                   min_confidence=args.min_confidence)
    return options, f"decoding: {asr_decoding.describe()} {origin}"


def load_pipeline(args: argparse.Namespace, options: dict | None = None) -> tuple[VoicePipeline, float]:
    """Load both models as ``options`` (:func:`resolve_pipeline_options`, resolved from ``args`` when not given)
    say; returns the pipeline and the load time in seconds."""
    if options is None:
        options, _ = resolve_pipeline_options(args)
    return VoicePipeline.load(**options)
