"""What a client is told when the server refuses or fails: :class:`RequestError` (a refusal with its HTTP status,
the message naming the field), the JSON ``{"error": ...}`` every refusal is, messages without server paths, and the
app's exception handlers (:data:`ERROR_HANDLERS`) that turn every failure into one of these, never a traceback."""

from __future__ import annotations

import contextlib
import logging
import re
import tempfile
from pathlib import Path

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from duet.errors import DuetError
from duet.foundation.errors import first_line, is_disk_full
from slm.generation import ContextLengthError

log = logging.getLogger(__name__)


class RequestError(DuetError):
    """A request the server refuses, with its HTTP status; the message names the field."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.headers = headers


def error_response(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


def without_paths(message: str, path: Path | None = None) -> str:
    """``message`` with the upload's ``path`` as "the upload" and any other absolute path as "<path>": a client
    never learns where the server keeps its files."""
    if path is not None:
        for name in (f"file:{path}", str(path), str(path.parent)):
            message = message.replace(name, "the upload")
    return re.sub(r"(?:file:)?/[^\s'\"]+", "<path>", message)


def internal_error(error: BaseException) -> str:
    """What a client is told of a failure that is not its fault: its first line, no server path."""
    return f"internal error: {without_paths(first_line(error))}"


def validation_message(error: RequestValidationError) -> str:
    parts = []
    for item in error.errors():
        where = ".".join(str(part) for part in item.get("loc", ())[1:]) or "request"
        parts.append(f"{where}: {item.get('msg', 'invalid')}")
    return "; ".join(parts)


@contextlib.contextmanager
def disk_full_named(what: str):
    """A full disk while ``what`` (loading the models: NeMo unpacks a .nemo into the temporary folder) as one line
    naming the path, a ``DuetError``, instead of a traceback."""
    try:
        yield
    except OSError as e:
        if not is_disk_full(e):
            raise
        raise DuetError(f"{what}: no space left on the device holding {e.filename or tempfile.gettempdir()} "
                        "(free some, or point TMPDIR elsewhere)") from None


async def refused(request: Request, error: RequestError) -> JSONResponse:
    return error_response(error.status, str(error), error.headers)


async def invalid(request: Request, error: RequestValidationError) -> JSONResponse:
    return error_response(400, validation_message(error))


async def too_long_for_the_model(request: Request, error: ContextLengthError) -> JSONResponse:
    return error_response(400, f"text: {error}")


async def failed(request: Request, error: Exception) -> JSONResponse:
    return error_response(500, internal_error(error))


async def http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
    if is_disk_full(error.__cause__):  # FastAPI's "error parsing the body": the multipart spool found no space
        log.error("no space left for a request body in %s", tempfile.gettempdir())
        return error_response(507, "the server has no disk space left for the request; retry later")
    return error_response(error.status_code, str(error.detail))


#: The app's handlers: every refusal and failure answered as ``{"error": ...}``
ERROR_HANDLERS = {RequestError: refused, RequestValidationError: invalid, ContextLengthError: too_long_for_the_model,
                  Exception: failed, StarletteHTTPException: http_error}
