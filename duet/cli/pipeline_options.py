"""The voice pipeline's command-line options and how they become one :class:`~duet.pipeline.PipelineSettings`,
shared by ``tools/pipeline.py`` and ``tools/serve.py`` so that both answer with the same models, the same ASR
decoding (the ``decoding.json`` beside the model included) and the same language-model decoding.

The boundary: :func:`pipeline_settings_from_args` is the one place the pipeline's ``argparse.Namespace`` is read;
the ASR decoding comes from one call (``duet.cli.cli_args.model_decoding_from_args``: the decoding options given
merged with the decoding.json beside the model) and nothing is written back onto the Namespace.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from duet.cli.cli_args import (
    ASR_BATCHING_FLAGS,
    add_batching_arguments,
    add_decoding_arguments,
    add_engine_argument,
    model_decoding_from_args,
    offline_batching_from_args,
)
from duet.asr.confidence import DEFAULT_MIN_CONFIDENCE, NOT_UNDERSTOOD_REPLY, check_min_confidence
from duet.demo.models import DEMO_SLM_MODEL, WHISPER_SLM_MODEL
from duet.errors import DuetError
from duet.io import shown_path
from duet.pipeline import PipelineSettings
from duet.foundation import EXPERIMENTS, python_command
from slm.generation import GenerationSettingsError, add_generation_arguments, generation_settings_from_args

# the models, batching and thresholds an option left out stands for
DEFAULTS = PipelineSettings()


def add_model_arguments(parser: argparse.ArgumentParser, streaming: bool = False) -> None:
    """``--asr-model``, ``--engine``, ``--int8``, ``--slm-model``, ``--asr-batch-size``, ``--max-chunk-seconds``,
    ``--trim-silence`` and ``--min-confidence`` (``streaming``: the script also has ``--stream``, which the batch
    options do not go with)."""
    not_streaming = "; not with --stream" if streaming else ""
    parser.add_argument("--asr-model", type=Path, default=DEFAULTS.asr_model, help="NeMo .nemo file")
    add_engine_argument(parser, "--asr-model")
    parser.add_argument("--int8", action="store_true", help="--engine onnx: the export's int8 graph")
    parser.add_argument("--slm-model", type=Path, default=DEFAULTS.slm_model,
                        help=f"Hugging Face model folder (default: {shown_path(WHISPER_SLM_MODEL)} once "
                             f"slm/finetune.py --config-name slm_whisper_offline has made it, else "
                             f"{shown_path(DEMO_SLM_MODEL)}, the demo's)")
    add_batching_arguments(parser, DEFAULTS.batching, ("batch_size", "max_chunk_seconds"), ASR_BATCHING_FLAGS,
                           streaming=streaming)
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
    batching = offline_batching_from_args(args, DEFAULTS.batching, ASR_BATCHING_FLAGS, streaming=stream)
    settings = PipelineSettings(asr_model=args.asr_model, slm_model=args.slm_model, engine=args.engine,
                                int8=args.int8, stream=stream, asr_decoding=decoding.settings,
                                asr_decoding_source=decoding.source, batching=batching, generation=generation,
                                trim_silence_s=args.trim_silence, min_confidence=decoding.min_confidence)
    return settings.validate(), f"decoding: {decoding.describe()}"
