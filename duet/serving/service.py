"""What every route and WebSocket session serves with (:class:`Service`: the loaded pipeline, the settings, the one
inference thread), and that thread (:class:`InferenceWorker`): every model call runs on it, so requests never share
a model call, and at most ``ServerSettings.queue_size`` requests wait for it or run on it; one more is answered 503
with ``Retry-After``."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import math
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Annotated, Callable

from fastapi import Depends
from fastapi.requests import HTTPConnection

from duet.pipeline import VoicePipeline
from duet.serving.errors import RequestError
from duet.serving.settings import ServerSettings
from duet.serving.warm_up import WarmUp


class InferenceWorker:
    """One thread that owns the models; at most ``capacity`` requests hold a slot (wait for it or run on it).

    A request takes a slot with :meth:`slot` for its whole life (audio decoding included, which runs beside
    the worker), then runs its model calls with :meth:`run`. The count is a plain locked integer, not an
    asyncio primitive, so it holds whatever event loop the request runs on.
    """

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.active = 0
        self._lock = threading.Lock()
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="duet-inference")
        # the last calls' wait for the thread and run on it (seconds): /health's queue figures and Retry-After
        self.waits: collections.deque[float] = collections.deque(maxlen=200)
        self.runs: collections.deque[float] = collections.deque(maxlen=200)
        self.busy_s = 0.0  # time on calls since the thread started: how busy a load kept it (bench/serve_load.py)

    def _try_take(self) -> bool:
        with self._lock:
            if self.active >= self.capacity:
                return False
            self.active += 1
            return True

    @contextlib.asynccontextmanager
    async def slot(self, wait: bool = False):
        """Hold one of the ``capacity`` slots; when all are taken, a 503 ``RequestError`` (or, with ``wait``,
        wait for one: the WebSocket's audio then queues in its connection)."""
        while not self._try_take():
            if not wait:
                retry = self.retry_after()
                raise RequestError(503, f"server busy: {self.capacity} requests are already queued; retry in "
                                        f"{retry} s", headers={"Retry-After": str(retry)})
            await asyncio.sleep(0.02)
        try:
            yield
        finally:
            with self._lock:
                self.active -= 1

    async def run(self, fn: Callable, *args):
        """``fn(*args)`` on the inference thread, after the calls queued before it."""
        submitted = time.perf_counter()

        def timed():
            started = time.perf_counter()
            self.waits.append(started - submitted)
            try:
                return fn(*args)
            finally:
                self.runs.append(time.perf_counter() - started)
                self.busy_s += self.runs[-1]  # written by this one thread only
        return await asyncio.get_running_loop().run_in_executor(self._executor, timed)

    def call(self, fn: Callable, *args):
        """``fn(*args)`` on the inference thread, waited for by the caller and left out of the queue's figures: the
        warm-up, before the server serves."""
        return self._executor.submit(fn, *args).result()

    def retry_after(self) -> int:
        """Seconds a refused client should wait: about as long as the queue takes to drain once (the median call
        times the slots), 1 to 60."""
        run = statistics.median(self.runs) if self.runs else 1.0
        return max(1, min(60, math.ceil(run * self.capacity)))

    def figures(self) -> dict:
        """/health's queue: slots taken, capacity, the last 200 calls' wait for the thread and time on it, and the
        thread's busy time since it started."""
        def spread(values) -> dict | None:
            if not values:
                return None
            ordered = sorted(values)
            return {"median": round(ordered[len(ordered) // 2], 4),
                    "p95": round(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], 4),
                    "max": round(ordered[-1], 4)}
        return {"active": self.active, "capacity": self.capacity, "calls": len(self.runs),
                "wait_s": spread(list(self.waits)), "run_s": spread(list(self.runs)), "busy_s": round(self.busy_s, 3)}

    def close(self) -> None:
        self._executor.shutdown(wait=True)


@dataclass(frozen=True)
class Service:
    """The server's state, built once by ``create_app`` and kept in ``app.state.service``: the pipeline (its models
    and default settings), the settings, the inference worker, the names /health reports, and the cache-aware model
    (None: the WebSocket re-decodes with the pipeline's offline model), how the WebSocket makes its partials, and
    what the warm-up did (None: ``--no-warm-up``)."""

    pipeline: VoicePipeline
    settings: ServerSettings
    worker: InferenceWorker
    asr_model: str
    slm_model: str
    streaming_model: object | None
    stream_note: str
    warm_up: WarmUp | None = None


def service_of(connection: HTTPConnection) -> Service:
    return connection.app.state.service


#: A route's (or WebSocket's) parameter that receives the app's :class:`Service`
Served = Annotated[Service, Depends(service_of)]
