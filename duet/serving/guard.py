"""Who may use the server, and how much they may send: :class:`RequestGuard`, the ASGI middleware in front of every
route (Host and Origin checks against DNS rebinding and other pages, the optional API key, request bodies bounded as
they arrive), and the warning for a server reachable beyond this machine without a key."""

from __future__ import annotations

import base64
import contextlib
import hmac
import ipaddress

from starlette.datastructures import Headers

from duet.serving.errors import error_response
from duet.serving.settings import ServerSettings

BODY_SLACK_BYTES = 64 * 1024  # multipart headers and form fields around the upload itself


class RequestGuard:
    """ASGI middleware in front of every route, HTTP and WebSocket alike, refusing before any route runs:

    - a ``Host`` that is neither an IP address, ``localhost`` nor one of ``allowed_hosts`` (400): a page on
      attacker.example whose name was re-pointed at this machine (DNS rebinding) sends its own name here;
    - an ``Origin`` other than the page's own (the scheme and the ``Host`` it was served from) or one of
      ``allowed_origins`` (403): another web page in the user's browser. Clients that are not browsers send none;
    - with an ``api_key``, a request without ``Authorization: Bearer <key>`` (401), except the page, its files
      and /health; a browser's WebSocket, which cannot send headers, offers the key as a subprotocol instead
      (:func:`presented_key`);
    - a body over the upload limit (413), counted as it streams in (a ``Content-Length`` over it is refused at
      once, a chunked body when it passes the limit): the route is told the client left, and nothing past the
      limit reaches the multipart parser, its temporary files or the disk.
    """

    PUBLIC = ("/", "/health")

    def __init__(self, app, settings: ServerSettings):
        self.app = app
        self.settings = settings
        self.body_limit = settings.max_upload_bytes + BODY_SLACK_BYTES

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] not in ("http", "websocket"):
            return await self.app(scope, receive, send)
        headers = Headers(scope=scope)
        refusal = self.refusal(scope, headers)
        if refusal is not None:
            status, message, extra = refusal
            if scope["type"] == "websocket":  # closed before the handshake completes: the client sees HTTP 403
                await receive()
                await send({"type": "websocket.close", "code": 1008, "reason": message[:120]})
                return
            return await error_response(status, message, extra)(scope, receive, send)
        if scope["type"] == "websocket":
            return await self.app(scope, receive, send)
        await self.limited(scope, receive, send)

    def refusal(self, scope, headers: Headers) -> tuple[int, str, dict | None] | None:
        settings = self.settings
        host = headers.get("host")
        if host is not None and not host_allowed(host, settings.allowed_hosts):
            return 400, (f"Host {host!r} is not served here (IP addresses, localhost and --allowed-host only: "
                         "a web page cannot reach this server under a name of its own)"), None
        origin = headers.get("origin")
        if origin is not None and origin not in settings.allowed_origins and not same_origin(origin, host, scope):
            return 403, f"Origin {origin!r} is not allowed (the page's own origin and --allowed-origin only)", None
        path = scope.get("path", "")
        if settings.api_key is not None and path not in self.PUBLIC and not path.startswith("/static/"):
            given = presented_key(scope, headers)
            if given is None or not hmac.compare_digest(given.encode(), settings.api_key.strip().encode()):
                return 401, "authorization: this server needs its API key (Authorization: Bearer <key>)", \
                    {"WWW-Authenticate": "Bearer"}
        length = headers.get("content-length")
        if length and length.isdigit() and int(length) > self.body_limit:
            return 413, too_large_message(self.settings, int(length)), None
        return None

    async def limited(self, scope, receive, send) -> None:
        received, refused, started = 0, False, False

        async def counted_receive():
            nonlocal received, refused
            if refused:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.body_limit:
                    refused = True
                    if not started:
                        await error_response(413, too_large_message(self.settings, received))(scope, receive, send)
                    return {"type": "http.disconnect"}  # the route stops reading: its parser never sees the rest
            return message

        async def guarded_send(message):
            nonlocal started
            if refused:  # the 413 went out: whatever the route answers to the cut body is dropped
                return
            started = True
            await send(message)

        await self.app(scope, counted_receive, guarded_send)


#: The WebSocket subprotocol the server agrees to when a client offers it: a browser that offers any subprotocol
#: (the key's, below) fails the handshake unless the server picks one of them, and it must not be the key's
STREAM_SUBPROTOCOL = "duet"
#: A browser's WebSocket cannot send an Authorization header: it offers ``duet.key.<key in base64url, unpadded>``
#: beside ``duet`` (a subprotocol is a token: base64url's characters are all allowed in one). The page does this.
KEY_SUBPROTOCOL_PREFIX = "duet.key."


def presented_key(scope, headers: Headers) -> str | None:
    """The API key a request presents: ``Authorization: Bearer <key>``, or on a WebSocket the key subprotocol."""
    scheme, _, given = headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer":
        return given.strip()
    if scope["type"] != "websocket":
        return None
    for protocol in scope.get("subprotocols", []):
        if protocol.startswith(KEY_SUBPROTOCOL_PREFIX):
            encoded = protocol[len(KEY_SUBPROTOCOL_PREFIX):]
            try:
                return base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4)).decode().strip()
            except ValueError:  # not base64 (binascii.Error), not UTF-8 (UnicodeDecodeError): no key given
                return None
    return None


def exposure_warning(settings: ServerSettings) -> str | None:
    """What ``tools/serve.py`` warns when the server listens beyond this machine without an API key, else None."""
    if settings.api_key is not None or settings.host == "localhost":
        return None
    with contextlib.suppress(ValueError):
        if ipaddress.ip_address(settings.host).is_loopback:
            return None
    return (f"warning: listening on {settings.host} without --api-key: anyone who can reach port {settings.port} "
            "can use the models; give --api-key-file (or --api-key)")


def too_large_message(settings: ServerSettings, size: int) -> str:
    return (f"request body of {size} bytes or more is larger than the upload limit of {settings.max_upload_mb:g} MiB")


def host_allowed(host: str, allowed: tuple[str, ...]) -> bool:
    """Whether a ``Host`` header names this server in a way no web page can re-point: an IP address, localhost,
    or a name the operator listed."""
    name = host[1:].partition("]")[0] if host.startswith("[") else host.rpartition(":")[0] if ":" in host else host
    name = name.lower().rstrip(".")
    if name == "localhost" or name in {a.lower() for a in allowed}:
        return True
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def same_origin(origin: str, host: str | None, scope) -> bool:
    """Whether ``origin`` is the page's own: the scheme this request came in on and the host it asked for."""
    secure = scope.get("scheme") in ("https", "wss")
    return host is not None and origin.lower() == f"{'https' if secure else 'http'}://{host}".lower()
