"""The server's routes: the page and /health, OpenAI's transcription endpoint, the whole pipeline, the language
model alone, and the WebSocket (its sessions in ``duet.serving.sessions``). Each takes the app's
:class:`~duet.serving.service.Service` as a dependency; every model call runs on its inference worker, inside a slot
of its queue (a full queue is a 503 with ``Retry-After``)."""

from __future__ import annotations

import dataclasses
import shutil
import time
from pathlib import Path
from typing import Annotated

import numpy as np
from fastapi import APIRouter, File, Form, UploadFile, WebSocket
from fastapi.responses import FileResponse

from duet.pipeline import PipelineResult, answer_fields, is_silent
from duet.serving.errors import RequestError
from duet.serving.guard import STREAM_SUBPROTOCOL
from duet.serving.options import PipelineForm, RespondRequest, pipeline_for_request
from duet.serving.responses import RESPONSE_FORMATS, TIMED_FORMATS, spoken, transcription_response
from duet.serving.service import Served
from duet.serving.sessions import StreamSession, TurnsSession
from duet.serving.uploads import read_upload
from duet.speech_out import SPEAK_ENGINE

WEB_FOLDER = Path(__file__).parent / "web"

router = APIRouter()


@router.get("/", include_in_schema=False)
async def page():
    return FileResponse(WEB_FOLDER / "index.html")


@router.get("/health")
async def health(service: Served):
    pipeline, settings = service.pipeline, service.settings
    return {"status": "ok", "asr_model": service.asr_model, "slm_model": service.slm_model,
            "asr_decoding": pipeline.describe_asr_decoding(),
            "generation": dataclasses.asdict(pipeline.settings.generation),
            "min_confidence": pipeline.settings.min_confidence, "stream_decoder": service.stream_note,
            "queue": service.worker.figures(),
            "turns": {"default": settings.turns, "turn_silence_s": settings.turn_silence,
                      "vad_threshold": settings.vad_threshold},
            "limits": {"max_audio_seconds": settings.max_audio_seconds, "max_upload_mb": settings.max_upload_mb,
                       "max_sample_rate": settings.max_sample_rate, "max_channels": settings.max_channels,
                       "max_decoded_samples": settings.max_decoded_samples,
                       "max_text_chars": settings.max_text_chars,
                       "stream_idle_seconds": settings.stream_idle_seconds},
            "api_key": settings.api_key is not None,
            "warm_up": None if service.warm_up is None else dataclasses.asdict(service.warm_up)}


@router.post("/v1/audio/transcriptions")
async def transcriptions(service: Served, file: Annotated[UploadFile, File()],
                         model: Annotated[str | None, Form()] = None,
                         response_format: Annotated[str, Form()] = "json"):
    """OpenAI-compatible; ``model`` is accepted and ignored (the server has one ASR model)."""
    if response_format not in RESPONSE_FORMATS:
        raise RequestError(400, f"response_format: must be one of {', '.join(RESPONSE_FORMATS)}, "
                                f"got {response_format!r}")
    pipeline, sample_rate = service.pipeline, service.pipeline.sample_rate

    def transcribe_segments(audio: np.ndarray, words: bool) -> list:
        return [] if is_silent(audio, sample_rate) else pipeline.transcribe_segments(audio, words=words)

    async with service.worker.slot():
        audio = await read_upload(file, service.settings, sample_rate)
        # word times only where the answer carries them: they cost 4-11 % more CPU
        segments = await service.worker.run(transcribe_segments, audio, response_format in TIMED_FORMATS)
    return transcription_response(segments, response_format, len(audio) / sample_rate)


@router.post("/v1/pipeline")
async def run_pipeline(service: Served, file: Annotated[UploadFile, File()],
                       form: Annotated[PipelineForm, Form()]):
    start = time.perf_counter()
    request_pipeline = pipeline_for_request(service.pipeline, form)
    if form.speak and shutil.which(SPEAK_ENGINE) is None:
        raise RequestError(501, f"speak: the server cannot speak ({SPEAK_ENGINE} is not installed)")
    async with service.worker.slot():
        audio = await read_upload(file, service.settings, service.pipeline.sample_rate)
        result = PipelineResult(file=file.filename or "upload")
        result.latency_s["audio_load"] = time.perf_counter() - start
        queued = time.perf_counter()

        def answer() -> PipelineResult:
            result.latency_s["queue_wait"] = time.perf_counter() - queued
            return request_pipeline.run_audio(audio, result, start)
        result = await service.worker.run(answer)
    body = result.to_json()
    if form.speak and result.response:
        body.update(await spoken(result.response))
    body["latency_s"]["total"] = round(time.perf_counter() - start, 4)
    return body


@router.post("/v1/respond")
async def respond(service: Served, request: RespondRequest):
    if not request.text.strip():
        raise RequestError(400, "text: empty; give the instruction to answer")
    if len(request.text) > service.settings.max_text_chars:
        raise RequestError(400, f"text: {len(request.text)} characters, more than the limit of "
                                f"{service.settings.max_text_chars}")
    request_pipeline = pipeline_for_request(service.pipeline, request)
    start = time.perf_counter()
    async with service.worker.slot():
        answer = await service.worker.run(request_pipeline.respond_with_calls, request.text.strip())
    # the tool calls executed into the answer (tool, input, result, error), and the model's own answer when an unsure
    # one was withheld, as /v1/pipeline's result gives them
    return {**answer_fields(answer), "latency_s": {"slm": round(time.perf_counter() - start, 4)}}


@router.websocket("/v1/stream")
async def stream(websocket: WebSocket, service: Served, speak: bool = False, turns: bool | None = None):
    offered = websocket.scope.get("subprotocols", [])
    await websocket.accept(subprotocol=STREAM_SUBPROTOCOL if STREAM_SUBPROTOCOL in offered else None)
    session = TurnsSession if (service.settings.turns if turns is None else turns) else StreamSession
    await session(websocket, service, speak).run()
