"""A request's language-model options, derived from ``slm.generation.GenerationSettings``: one optional field per
settings field (its type and help from the dataclass; a field left out keeps the server's value), checked by the
settings' own :meth:`~slm.generation.GenerationSettings.validate`, whose messages name the request's field
(``top_p must be in (0, 1], got 2``): each bad value a 400 naming it."""

from __future__ import annotations

import dataclasses
import typing

from pydantic import BaseModel, ConfigDict, Field, create_model

from duet.pipeline import VoicePipeline
from duet.serving.errors import RequestError
from slm.generation import HELP, GenerationSettings, GenerationSettingsError

GENERATION_FIELDS = tuple(field.name for field in dataclasses.fields(GenerationSettings))
_TYPES = typing.get_type_hints(GenerationSettings)

#: The options of ``/v1/pipeline``'s form and ``/v1/respond``'s JSON: every ``GenerationSettings`` field, optional
GenerationOptions = create_model(
    "GenerationOptions", __doc__="Language-model decoding options of one request (GenerationSettings' fields).",
    **{name: (_TYPES[name] | None, Field(None, description=HELP[name])) for name in GENERATION_FIELDS})


class RespondRequest(GenerationOptions):
    """``/v1/respond``'s JSON body: the text to answer, and options; an unknown key is refused (a typo)."""

    model_config = ConfigDict(extra="forbid")
    text: str


class PipelineForm(GenerationOptions):
    """``/v1/pipeline``'s form fields beside the file: whether to speak the answer, and options."""

    speak: bool = False


def generation_for_request(base: GenerationSettings, options: BaseModel) -> GenerationSettings:
    """``base`` with the options the request gave, validated; a bad one is a 400 naming its field."""
    given = options.model_dump(include=set(GENERATION_FIELDS), exclude_none=True)
    try:
        return dataclasses.replace(base, **given).validate(spell=str)  # named as the request names it: top_p
    except GenerationSettingsError as e:
        raise RequestError(400, str(e)) from None


def pipeline_for_request(pipeline: VoicePipeline, options: BaseModel) -> VoicePipeline:
    """``pipeline``'s models answering with the request's settings: its language-model ``options``
    (:func:`generation_for_request`) over the server's."""
    generation = generation_for_request(pipeline.settings.generation, options)
    return pipeline.with_settings(dataclasses.replace(pipeline.settings, generation=generation))
