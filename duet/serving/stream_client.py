"""A blocking client of the server's WebSocket (``/v1/stream``) that plays audio as a microphone would: 16 kHz mono
PCM16 in pieces sent when each piece would have been recorded, every message the server sends timed on arrival.
For ``bench/turn_latency.py`` and ``bench/serve_load.py``; wsproto over a plain socket, one thread, no event loop.
"""

from __future__ import annotations

import json
import select
import socket
import time
from dataclasses import dataclass, field

import numpy as np
from wsproto import ConnectionType, WSConnection
from wsproto.events import (AcceptConnection, BytesMessage, CloseConnection, Ping, RejectConnection, Request,
                            TextMessage)

from duet.errors import DuetError

SAMPLE_RATE = 16000


class StreamClientError(DuetError):
    """The WebSocket was refused, closed early or silent for too long; the message says which and where."""


def pcm16(audio: np.ndarray) -> bytes:
    return (np.clip(audio, -1, 1) * 32767).astype("<i2").tobytes()


@dataclass
class Played:
    """What one session heard: each message with its arrival (``time.perf_counter()``), and when the first sample
    of the audio was, as a microphone goes, spoken (``start``: the first piece is sent one piece later)."""

    start: float
    messages: list[tuple[float, dict]] = field(default_factory=list)

    def of_type(self, kind: str) -> list[tuple[float, dict]]:
        return [(at, m) for at, m in self.messages if m["type"] == kind]


def play(url: str, audio: np.ndarray, query: str = "turns=true", piece_s: float = 0.1, realtime: bool = True,
         timeout_s: float = 300.0, until: tuple[str, ...] = ("done",), api_key: str | None = None,
         end: bool = True, speed: float = 1.0) -> Played:
    """Stream ``audio`` (mono float32, 16 kHz) to ``url``'s ``/v1/stream?<query>`` in pieces of ``piece_s``: piece k
    leaves at ``start + (k + 1) * piece_s / speed`` with ``realtime`` (``speed`` 4: four times faster than it was
    spoken; as fast as the socket takes them without ``realtime``), then
    ``{"type": "end"}``; reads until a message of a type in ``until`` (or an error) and the close. ``api_key``: the
    server's (``tools/serve.py --api-key``), sent as ``Authorization: Bearer``; ``end`` False: no ``{"type": "end"}``,
    the client goes quiet (the server's idle timeout ends the stream). Raises
    :class:`StreamClientError` when the server refuses, closes early or sends nothing for ``timeout_s`` (a close
    after a message of a type in ``until``, as at the server's length limit, is no early close)."""
    host, port = url.split("//", 1)[1].rstrip("/").split(":")
    data, step = pcm16(audio), int(piece_s * SAMPLE_RATE) * 2
    pieces = [data[at:at + step] for at in range(0, len(data), step)]
    connection = WSConnection(ConnectionType.CLIENT)
    where = f"{url}/v1/stream?{query}"
    with socket.create_connection((host, int(port)), timeout=timeout_s) as sock:
        headers = [(b"authorization", f"Bearer {api_key}".encode())] if api_key else []
        sock.sendall(connection.send(Request(host=f"{host}:{port}", target=f"/v1/stream?{query}",
                                             extra_headers=headers)))
        text, accepted, closed, finished = "", False, False, False
        played = Played(start=0.0)

        def read(wait_s: float) -> None:
            nonlocal text, accepted, closed, finished
            if not select.select([sock], [], [], max(0.0, wait_s))[0]:
                return
            chunk = sock.recv(1 << 16)
            connection.receive_data(chunk or None)
            for event in connection.events():
                if isinstance(event, AcceptConnection):
                    accepted = True
                elif isinstance(event, RejectConnection):
                    raise StreamClientError(f"{where}: the server refused the WebSocket")
                elif isinstance(event, Ping):
                    sock.sendall(connection.send(event.response()))
                elif isinstance(event, TextMessage):
                    text += event.data
                    if event.message_finished:
                        message, text = json.loads(text), ""
                        played.messages.append((time.perf_counter(), message))
                        finished = finished or message["type"] in until or message["type"] == "error"
                elif isinstance(event, CloseConnection):
                    closed = True
                    if connection.state.name not in ("CLOSED", "LOCAL_CLOSING"):
                        sock.sendall(connection.send(event.response()))
            if not chunk:
                closed = True

        deadline = time.monotonic() + timeout_s
        while not accepted:
            if time.monotonic() > deadline:
                raise StreamClientError(f"{where}: no handshake within {timeout_s:g} s")
            read(1.0)
        played.start = time.perf_counter()
        for k, piece in enumerate(pieces):
            due = played.start + (k + 1) * piece_s / speed if realtime else 0.0
            while (left := due - time.perf_counter()) > 0:  # read what arrives while the next piece is recorded
                read(left)
            if closed and finished:  # the server ended the stream itself (its length limit) and said so
                break
            if closed:
                raise StreamClientError(f"{where}: closed after {k} of {len(pieces)} pieces")
            sock.sendall(connection.send(BytesMessage(data=piece)))
        if end and not closed:
            sock.sendall(connection.send(TextMessage(data=json.dumps({"type": "end"}))))
        last = time.monotonic()
        while not (finished and closed):
            if closed:
                raise StreamClientError(f"{where}: closed before a message of type {'/'.join(until)}")
            count = len(played.messages)
            read(1.0)
            if len(played.messages) != count:
                last = time.monotonic()
            elif time.monotonic() - last > timeout_s:
                raise StreamClientError(f"{where}: nothing for {timeout_s:g} s after the end of the audio")
    return played
