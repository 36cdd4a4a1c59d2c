"""Generation with a fine-tuned GPT-2 folder: loading it (:func:`load_model`), answering instructions
(:func:`respond`, :func:`generate_responses`: greedy, beam search or sampling, with the KV cache), and how the
language model decodes: one typed settings class with the project's defaults, its command-line flags, and the one
converter from parsed flags to settings.

Every entry script that generates (``slm/generate.py``, ``tools/pipeline.py``, ``bench/pipeline_latency.py``)
adds the flags with :func:`add_generation_arguments` and reads them with :func:`generation_settings_from_args`;
library code (:func:`respond`, ``duet.pipeline.VoicePipeline``) takes a :class:`GenerationSettings`.
Each field is spelt as its flag with dashes (``max_new_tokens`` is ``--max-new-tokens``), and error messages
name the flag. Library use: ``tokenizer, model = load_model(path)`` then
``respond(model, tokenizer, "set a timer", GenerationSettings(strategy="beam"))``. Decoding is ``transformers``'
``generate`` with ``use_cache=True``; it stops at the EOS token. The repetition penalty reads the answer's own
tokens only: transformers' default also penalises every token of the prompt, so an answer that repeats the request's
name, day or number ("Calling grandma.") is pushed towards another one ("Calling Carlos.").

Every answer leaves here with its tool calls executed (``slm.tool_calls``: ``<<calc: 50 - 3>>`` becomes ``47``, a bad
call the whole answer's plain fallback), so the pipeline, the server and ``slm/generate.py`` show the same text;
:func:`generate_answers` and :func:`respond_with_calls` also return the calls (tool, input, result). An answer
holding a token the model gave less probability than its floor (``min_token_prob``: the settings', else the model
folder's ``answer.min_token_prob``) is withheld, and the user reads the decline of the action by name or "I don't know
that." instead (``slm.tool_calls.unsure_answer``; the answer is kept as ``withheld``).
"""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Callable, Sequence

import torch
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException
from safetensors import SafetensorError
from yaml import YAMLError

from duet.foundation.errors import first_line
from slm.data import format_alpaca_prompt
from slm.errors import SlmError
from slm.tool_calls import ExecutedText, execute_calls, unsure_answer

log = logging.getLogger(__name__)

STRATEGIES = ("greedy", "beam", "sample")
# Bounds on what one request may ask of the model (a server takes these from strangers): each beam is one more
# sequence through the model, so 5,000 beams held the CPU for 49 s and 1.7 GB; no answer is longer than GPT-2's
# context; a temperature or penalty near 0 divides the logits into inf/nan, a huge one flattens them to noise.
MAX_NEW_TOKENS = 1024
MAX_NUM_BEAMS = 16
TEMPERATURE_RANGE = (0.01, 100.0)
REPETITION_PENALTY_RANGE = (0.01, 100.0)


class GenerationSettingsError(SlmError, ValueError):
    """A decoding value out of range, named by its flag (``--top-p must be in (0, 1], got 2``)."""


@dataclass(frozen=True)
class GenerationSettings:
    """Decoding settings for ``model.generate``. Every value is checked by :meth:`validate` whatever the strategy,
    so a typo in an option the strategy does not read is still an error, never silently ignored.

    The defaults are the voice pipeline's: the demo's answers (experiments/demo_pipeline/answers.jsonl and the
    figures in RESULTS.md) were produced with them, so the demo behaves as before.
    """

    strategy: str = "greedy"
    max_new_tokens: int = 64  # the assistant's answers are one sentence; 64 tokens bound a rambling one
    num_beams: int = 4  # beam search width
    temperature: float = 0.8  # sampling only
    top_k: int = 50  # sampling: keep the k most likely tokens (0 = off)
    top_p: float = 0.95  # sampling: nucleus mass (1.0 = off)
    repetition_penalty: float = 1.1  # > 1 discourages the answer repeating itself (not the request's words, module
    # doc); applies to greedy and beam search too
    min_token_prob: float | None = None  # an answer holding a token the model gave less probability is withheld
    # (unsure_answer: a decline by name, "I don't know that."); None = the model folder's own answer.min_token_prob
    # (greedy and beam search: it was measured on greedy answers), 0 = off

    def validate(self, spell: Callable[[str], str] | None = None) -> "GenerationSettings":
        """Return ``self`` when every value is usable; else raise ``GenerationSettingsError`` naming the item as
        ``spell`` writes a field's name: its flag (``--top-p``) by default; the server names a request's field
        (``top_p``)."""
        spell = spell or flag
        if self.strategy not in STRATEGIES:
            raise GenerationSettingsError(f"{spell('strategy')} must be one of {', '.join(STRATEGIES)}, "
                                          f"got '{self.strategy}'")
        for name, ok, rule in (("max_new_tokens", self.max_new_tokens >= 1, ">= 1"),
                               ("repetition_penalty", self.repetition_penalty > 0, "> 0"),
                               ("top_k", self.top_k >= 0, ">= 0 (0 = off)"),
                               ("top_p", 0 < self.top_p <= 1, "in (0, 1]")):
            if not ok:
                raise GenerationSettingsError(f"{spell(name)} must be {rule}, got {getattr(self, name):g}")
        if self.strategy == "beam" and self.num_beams < 2:
            raise GenerationSettingsError(f"beam search needs {spell('num_beams')} >= 2, got {self.num_beams:g}")
        if self.strategy == "sample" and self.temperature <= 0:
            raise GenerationSettingsError(f"sampling needs {spell('temperature')} > 0, got {self.temperature:g}")
        if self.min_token_prob is not None and not 0 <= self.min_token_prob <= 1:  # nan fails too
            raise GenerationSettingsError(f"{spell('min_token_prob')} must be in [0, 1] (0 = off), "
                                          f"got {self.min_token_prob:g}")
        for name, (low, high) in (("max_new_tokens", (1, MAX_NEW_TOKENS)), ("num_beams", (1, MAX_NUM_BEAMS)),
                                  ("temperature", TEMPERATURE_RANGE),
                                  ("repetition_penalty", REPETITION_PENALTY_RANGE)):
            if not low <= getattr(self, name) <= high:  # nan fails every comparison: refused too
                raise GenerationSettingsError(f"{spell(name)} must be in [{low:g}, {high:g}], "
                                              f"got {getattr(self, name):g}")
        return self

    def generate_kwargs(self, prompt_tokens: int) -> dict:
        """Keyword arguments for ``model.generate`` (KV cache on) of prompts ``prompt_tokens`` long (left padding
        included), after :meth:`validate`; the repetition penalty a logits processor that skips the prompt."""
        self.validate()
        # transformers takes ~2.6 s to import: only the calls that generate pay for it
        from transformers import LogitsProcessorList, RepetitionPenaltyLogitsProcessor

        # transformers' own penalty off (a model's generation_config may set one): the processor below is the one
        kwargs = {"max_new_tokens": self.max_new_tokens, "use_cache": True, "repetition_penalty": 1.0}
        if self.repetition_penalty != 1.0:
            kwargs["logits_processor"] = LogitsProcessorList(
                [RepetitionPenaltyLogitsProcessor(self.repetition_penalty, prompt_ignore_length=prompt_tokens)])
        if self.strategy == "greedy":
            return {**kwargs, "do_sample": False, "num_beams": 1}
        if self.strategy == "beam":
            return {**kwargs, "do_sample": False, "num_beams": self.num_beams, "early_stopping": True}
        # one sequence a row whatever the model's generation_config says (its answers' scores assume it)
        return {**kwargs, "do_sample": True, "num_beams": 1, "temperature": self.temperature, "top_k": self.top_k,
                "top_p": self.top_p}


class ContextLengthError(SlmError, ValueError):
    """A prompt that leaves no room for an answer in the model's context, with both numbers."""


def new_tokens_that_fit(prompt_tokens: int, max_new_tokens: int, context: int | None) -> int:
    """``max_new_tokens``, capped so that prompt and answer fit the model's ``context`` positions (None: no limit).

    Past its last position GPT-2 indexes outside its position table: an IndexError on the CPU, a device-side
    assert that poisons the whole CUDA context on a GPU. A prompt that fills the context alone is refused.
    """
    if context is None or prompt_tokens + max_new_tokens <= context:
        return max_new_tokens
    if prompt_tokens >= context:
        raise ContextLengthError(f"the prompt is {prompt_tokens} tokens and the model's context is {context}: "
                                 "no room for an answer; shorten the instruction or its input")
    return context - prompt_tokens


def flag(field_name: str) -> str:
    """The command-line flag of a ``GenerationSettings`` field: ``top_p`` -> ``--top-p``."""
    return "--" + field_name.replace("_", "-")


HELP = {"strategy": "language model decoding", "num_beams": f"beam search width (1..{MAX_NUM_BEAMS})",
        "temperature": "sampling temperature ({:g}..{:g})".format(*TEMPERATURE_RANGE),
        "top_k": "sampling: keep the k most likely tokens (0 = off)", "top_p": "sampling: nucleus mass (1.0 = off)",
        "repetition_penalty": ">1 discourages repeats ({:g}..{:g})".format(*REPETITION_PENALTY_RANGE),
        "max_new_tokens": f"longest answer in tokens, at most {MAX_NEW_TOKENS} (generation also stops at EOS)",
        "min_token_prob": "withhold an answer holding a token the model gave less probability: a decline of the action "
                          "or \"I don't know that.\" instead (0..1, 0 = off; default: the model folder's own, not "
                          "when sampling)"}


def add_generation_arguments(parser: argparse.ArgumentParser) -> None:
    """Add one flag per ``GenerationSettings`` field, defaulting to the field's default."""
    group = parser.add_argument_group("language model decoding")
    for field in fields(GenerationSettings):
        extra = {"choices": STRATEGIES} if field.name == "strategy" else \
            {"type": float if field.default is None else type(field.default)}
        group.add_argument(flag(field.name), default=field.default, **extra,
                           help=f"{HELP[field.name]} (default: {field.default})")


def generation_settings_from_args(args: argparse.Namespace) -> GenerationSettings:
    """The validated settings of the flags :func:`add_generation_arguments` added; a bad value is a
    ``GenerationSettingsError`` naming its flag, before any model loads."""
    return GenerationSettings(**{field.name: getattr(args, field.name) for field in fields(GenerationSettings)}) \
        .validate()


class SlmModelError(SlmError, ValueError):
    """A language-model folder that cannot be loaded (missing or corrupt files), named in the message."""


class SlmDeviceError(SlmError, ValueError):
    """A ``--device`` that names no usable device."""


def pick_device(requested: str = "auto") -> str:
    """``auto``: the GPU when CUDA is available (as the fine-tune does), else the CPU; anything else is used as
    given (``cpu``, ``cuda``, ``cuda:1``), after checking that it exists."""
    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(requested)
    except RuntimeError:
        raise SlmDeviceError(f"--device {requested!r} is not a device; use auto, cpu, cuda or cuda:N") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise SlmDeviceError(f"--device {requested}: CUDA is not available on this machine")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise SlmDeviceError(f"--device {requested}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return requested


def load_model(path: str | Path, device: str | None = None):
    """Tokenizer and model from a folder written by ``slm/finetune.py`` (or any GPT-2 HF folder).

    A folder that is not one, or whose files are missing or corrupt, is an ``SlmModelError`` naming it.
    """
    # transformers takes ~2.6 s to import: only the calls that use it pay for it
    from transformers import GPT2LMHeadModel

    from slm.modeling import load_tokenizer

    path = Path(path)
    if not (path / "config.json").is_file():
        raise SlmModelError(f"{path}: not a model folder (no config.json); train one with slm/finetune.py")
    # without these AutoTokenizer falls back to an almost empty vocabulary instead of failing
    if not any((path / name).is_file() for name in ("tokenizer.json", "vocab.json")):
        raise SlmModelError(f"{path}: no tokenizer files (tokenizer.json or vocab.json + merges.txt)")
    try:
        tokenizer = load_tokenizer(path)
        model = GPT2LMHeadModel.from_pretrained(path)
    except (OSError, ValueError, SafetensorError) as e:  # missing or corrupt weights / tokenizer files
        raise SlmModelError(f"{path}: cannot load the model folder ({first_line(e)})") from e
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = model.to(pick_device(device or "auto"))
    model.eval()
    model.min_token_prob = folder_min_token_prob(path)  # read by answer_floor
    return tokenizer, model


def folder_min_token_prob(path: Path) -> float:
    """``answer.min_token_prob`` of the finetune_config.yaml that ``slm/finetune.py`` saved in the model folder (the
    preset's value: measured for the demo's, off for open-ended models); 0 (off) for a folder without one."""
    config = path / "finetune_config.yaml"
    if not config.is_file():
        return 0.0
    try:
        value = OmegaConf.select(OmegaConf.load(config), "answer.min_token_prob", default=0.0)
    except (OmegaConfBaseException, YAMLError) as e:
        raise SlmModelError(f"{config}: cannot be read ({first_line(e)})") from e
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 <= value <= 1:
        raise SlmModelError(f"{config}: answer.min_token_prob must be a number in [0, 1], got {value!r}")
    return float(value)


def generate_answers(model, tokenizer, examples: Sequence[dict], settings: GenerationSettings = GenerationSettings(),
                     batch_size: int = 8) -> list[ExecutedText]:
    """Answers for Alpaca rows (``instruction`` and optional ``input``), in order, decoded with ``settings``, each
    with its tool calls executed (the text) and recorded (the calls). An answer holding a token the model gave less
    than the settings' (or the model's own) ``min_token_prob`` is withheld (``slm.tool_calls.unsure_answer``)."""
    floor = answer_floor(model, settings)
    if not floor:
        texts = generate_model_texts(model, tokenizer, examples, settings, batch_size)
        return [execute_calls(text, request=e["instruction"]) for text, e in zip(texts, examples, strict=True)]
    answers = []
    for scored, example in zip(generate_scored_texts(model, tokenizer, examples, settings, batch_size), examples,
                               strict=True):
        executed = execute_calls(scored.text, request=example["instruction"])
        unsure = unsure_answer(example["instruction"], executed.text) if scored.least_token_prob < floor else None
        # an unsure answer that says what would replace it is shown as it is, its calls with it
        answers.append(unsure if unsure is not None and unsure.withheld is not None else executed)
    return answers


def answer_floor(model, settings: GenerationSettings) -> float:
    """The ``min_token_prob`` that applies: the settings' own, else the one :func:`load_model` read from the model's
    folder (``answer.min_token_prob`` of its finetune_config.yaml) unless the answers are sampled, else 0 (off).
    The folder's floor was measured on greedy answers; a sampled answer holds unlikely tokens by design."""
    if settings.min_token_prob is not None:
        return settings.min_token_prob
    return 0.0 if settings.strategy == "sample" else getattr(model, "min_token_prob", 0.0)


def generate_responses(model, tokenizer, examples: Sequence[dict], settings: GenerationSettings = GenerationSettings(),
                       batch_size: int = 8) -> list[str]:
    """The texts of :func:`generate_answers`: what a user is shown."""
    return [answer.text for answer in generate_answers(model, tokenizer, examples, settings, batch_size)]


@dataclass(frozen=True)
class ScoredText:
    """What the model wrote for a row (calls unexecuted), and the probability it gave the least likely token of it
    (the EOS that ends it left out; 1.0 for an empty answer): how unsure the answer's least sure word was."""

    text: str
    least_token_prob: float


def generate_model_texts(model, tokenizer, examples: Sequence[dict], settings: GenerationSettings = GenerationSettings(),
                         batch_size: int = 8) -> list[str]:
    """What the model writes for each row, tool calls unexecuted, decoded with ``settings``.

    Prompts are left-padded so every row's answer starts right after its own prompt.
    """
    return [scored.text for scored in _generate(model, tokenizer, examples, settings, batch_size, score=False)]


def generate_scored_texts(model, tokenizer, examples: Sequence[dict],
                          settings: GenerationSettings = GenerationSettings(), batch_size: int = 8) -> list[ScoredText]:
    """:func:`generate_model_texts` with each answer's least token probability: the model's own distribution over
    each token it wrote, the decoding's repetition penalty or sampling warps left out (the raw logits of each step;
    for beam search, one more forward pass)."""
    return _generate(model, tokenizer, examples, settings, batch_size, score=True)


def _generate(model, tokenizer, examples: Sequence[dict], settings: GenerationSettings, batch_size: int,
              score: bool) -> list[ScoredText]:
    settings.validate()
    prompts = [format_alpaca_prompt(e["instruction"], e.get("input", "")) for e in examples]
    tokenizer.padding_side = "left"
    context = getattr(model.config, "n_positions", None)
    answers, capped = [], False
    model.eval()
    for start in range(0, len(prompts), batch_size):
        # with the tokens the tokenizer puts before a text, as in training (slm.data.tokenize_example)
        batch = tokenizer(prompts[start:start + batch_size], return_tensors="pt", padding=True).to(model.device)
        prompt_tokens = batch["input_ids"].shape[1]  # left padding counts: the answer starts after it
        fitting = new_tokens_that_fit(prompt_tokens, settings.max_new_tokens, context)
        if fitting < settings.max_new_tokens and not capped:
            log.warning("answers capped at %d new tokens (not --max-new-tokens %d): a %d-token prompt and the "
                        "model's %d-token context", fitting, settings.max_new_tokens, prompt_tokens, context)
            capped = True
        kwargs = {**settings.generate_kwargs(prompt_tokens), "max_new_tokens": fitting}
        # one sequence a row (greedy, sampling): the model's raw logits at each step come with the answer; beam
        # search's belong to its beams, so its answers are scored in one more pass
        step_logits = score and kwargs.get("num_beams", 1) == 1
        with torch.no_grad():
            output = model.generate(**batch, pad_token_id=tokenizer.eos_token_id,
                                    eos_token_id=tokenizer.eos_token_id, **kwargs,
                                    **({"output_logits": True, "return_dict_in_generate": True} if step_logits else {}))
        sequences = output.sequences if step_logits else output
        new_tokens = sequences[:, prompt_tokens:]
        texts = [text.strip() for text in tokenizer.batch_decode(new_tokens, skip_special_tokens=True)]
        if step_logits:  # step by step: the chosen token's probability, not a batch x steps x vocabulary copy
            probs = torch.stack([torch.softmax(logits.float(), dim=-1).gather(-1, new_tokens[:, i, None]).squeeze(-1)
                                 for i, logits in enumerate(output.logits)], dim=1)
            least = _least_before_eos(probs, new_tokens, tokenizer.eos_token_id)
        elif score:
            least = _least_token_probs(model, batch["attention_mask"], sequences, prompt_tokens, tokenizer.eos_token_id)
        else:
            least = [1.0] * len(texts)
        answers.extend(ScoredText(text, p) for text, p in zip(texts, least, strict=True))
    return answers


def _least_token_probs(model, prompt_mask: torch.Tensor, output: torch.Tensor, prompt_tokens: int,
                       eos_token_id: int) -> list[float]:
    """Per row of ``output`` (left-padded prompts, then the answers), the least probability the model gives a token
    of its answer before the first EOS, teacher-forced in one pass with the positions generation used (left padding
    does not count)."""
    new = output[:, prompt_tokens:]
    mask = torch.cat([prompt_mask, torch.ones_like(new)], dim=1)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():  # the logits of the last prompt token and every answer token but the last
        logits = model(output, attention_mask=mask, position_ids=positions,
                       logits_to_keep=new.shape[1] + 1).logits[:, :-1].float()
    return _least_before_eos(torch.softmax(logits, dim=-1).gather(-1, new.unsqueeze(-1)).squeeze(-1), new, eos_token_id)


def _least_before_eos(probs: torch.Tensor, new: torch.Tensor, eos_token_id: int) -> list[float]:
    """Per row, the least of ``probs`` (one per answer token of ``new``) before the answer's first EOS; 1.0 for an
    empty answer."""
    least = []
    for row_probs, row_tokens in zip(probs, new):
        ends = (row_tokens == eos_token_id).nonzero()
        length = int(ends[0]) if len(ends) else len(row_tokens)
        least.append(float(row_probs[:length].min()) if length else 1.0)
    return least


def respond_with_calls(model, tokenizer, instruction: str, input_text: str = "",
                       settings: GenerationSettings = GenerationSettings()) -> ExecutedText:
    """One answer to one instruction (e.g. an ASR transcript), decoded with ``settings``, its calls executed."""
    return generate_answers(model, tokenizer, [{"instruction": instruction, "input": input_text}], settings,
                            batch_size=1)[0]


def respond(model, tokenizer, instruction: str, input_text: str = "",
            settings: GenerationSettings = GenerationSettings()) -> str:
    """The text of :func:`respond_with_calls`."""
    return respond_with_calls(model, tokenizer, instruction, input_text, settings).text
