"""The voice pipeline over HTTP: ``create_app(pipeline, settings)`` builds the FastAPI app around an already loaded
:class:`~duet.pipeline.VoicePipeline` (``tools/serve.py`` loads the models once, as ``tools/pipeline.py`` does;
tests pass small in-memory ones).

Where things are: the routes (``duet.serving.routes``) and the WebSocket's sessions (``duet.serving.sessions``,
their decoders in ``duet.serving.streams``); uploads' audio within the limits (``duet.serving.uploads``); who may
use the server (``duet.serving.guard``); the one inference thread and what the routes serve with
(``duet.serving.service``); refusals and failures as ``{"error": ...}`` (``duet.serving.errors``); the settings
(``duet.serving.settings``). Language-model options are per request (``duet.serving.options``): each request answers
with its own copy of the pipeline's settings, never by changing the pipeline's.
"""

from __future__ import annotations

import contextlib

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from duet.pipeline import VoicePipeline
from duet.serving.errors import ERROR_HANDLERS
from duet.serving.guard import RequestGuard
from duet.serving.heap import return_freed_blocks
from duet.serving.routes import WEB_FOLDER, router
from duet.serving.service import InferenceWorker, Service
from duet.serving.settings import ServerSettings
from duet.serving.streams import stream_decoder_note
from duet.serving.warm_up import warm_up


def create_app(pipeline: VoicePipeline, settings: ServerSettings = ServerSettings(), asr_model: str = "asr",
               slm_model: str = "slm", streaming_model=None) -> FastAPI:
    """The FastAPI app serving ``pipeline``; ``asr_model``/``slm_model`` are the names /health reports.

    ``streaming_model``: a loaded cache-aware model (``settings.streaming_asr_model``) for the WebSocket's
    partials; without one the WebSocket re-decodes with the pipeline's offline model.

    With ``settings.warm_up`` a bundled sample is transcribed and answered on the inference thread first
    (``duet.serving.warm_up``; /health reports it): a ``WarmUpError`` when that fails."""
    settings.validate()
    return_freed_blocks()  # a long upload's peak stays within the memory target (duet.serving.heap)
    worker = InferenceWorker(settings.queue_size)
    try:
        warmed = worker.call(warm_up, pipeline) if settings.warm_up else None
    except BaseException:
        worker.close()
        raise

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        worker.close()

    # no /docs or /redoc: FastAPI's pages load Swagger UI and ReDoc from a CDN; /openapi.json describes the API
    app = FastAPI(title="duet voice pipeline", lifespan=lifespan, docs_url=None, redoc_url=None,
                  exception_handlers=ERROR_HANDLERS)
    app.state.service = Service(pipeline, settings, worker, asr_model, slm_model, streaming_model,
                                stream_decoder_note(settings, streaming_model), warmed)
    app.mount("/static", StaticFiles(directory=WEB_FOLDER), name="static")
    app.add_middleware(RequestGuard, settings=settings)
    app.include_router(router)
    return app
