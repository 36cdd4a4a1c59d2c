"""Partial transcripts of a growing recording, and the audio a WebSocket received and has not decoded yet.

Two stream decoders with one interface (``feed(pcm) -> partial text or None``, ``finish() -> final text``,
``report() -> dict``): :class:`RedecodeStream` decodes the whole buffer again with the offline model (its cost,
quadratic in the length, in its docstring), :class:`CacheAwareStream` encodes each chunk once with a cache-aware
model. :class:`StreamInbox` holds what the socket's reader took in while decoding was behind, within the stream's
length limit."""

from __future__ import annotations

import asyncio
import collections
import statistics
import time
from typing import Callable

import numpy as np

from duet.asr.confidence import utterance_confidence
from duet.asr.streaming import StreamingSession, streaming_latency
from duet.asr.words import TimedTranscript
from duet.pipeline import is_silent
from duet.serving.settings import ServerSettings

STREAM_SAMPLE_RATE = 16000  # what the WebSocket takes: 16 kHz mono PCM16 little-endian


class RedecodeStream:
    """Partial transcripts of a growing recording with an offline (non-streaming) model.

    :meth:`feed` appends audio, and once ``interval_s`` more of it has arrived decodes the whole buffer again
    (``transcribe``: the pipeline's own cut-at-pauses decoding), returning the new partial transcript; the
    final transcript (:meth:`finish`) is one more decode of everything. The cost grows with the square of the
    stream's length: the k-th decode covers k x ``interval_s`` seconds, so n intervals cost n(n+1)/2 interval's
    worth of decoding; :meth:`report` gives the measured time per decode (the last one is the largest). Once
    a decode takes longer than ``interval_s``, the next waits for as much new audio as that decode took, so
    the partials thin out instead of falling behind a live stream.

    :class:`CacheAwareStream` has the same interface (``feed(pcm) -> partial text or None``, ``finish() -> final
    text``, ``report() -> dict``).
    """

    def __init__(self, transcribe: Callable[[np.ndarray], str], sample_rate: int, interval_s: float,
                 transcribe_final: Callable[[np.ndarray], TimedTranscript] | None = None):
        self.transcribe = transcribe
        # the final decode, with word confidences (they cost 4-11 % more CPU: the partials go without)
        self.transcribe_final = transcribe_final
        self.sample_rate = sample_rate
        self.interval = int(interval_s * sample_rate)
        self.interval_s = interval_s
        self.pieces: list[np.ndarray] = []
        self.samples = 0
        self.decoded_at = 0  # samples in the buffer at the last decode
        self.text = ""
        self.confidence: float | None = None  # the final transcript's (duet.asr.confidence), with transcribe_final
        self.decode_seconds: list[float] = []

    def _decode(self, final: bool = False) -> str:
        audio = np.concatenate(self.pieces) if self.pieces else np.zeros(0, dtype=np.float32)
        self.pieces = [audio]
        self.decoded_at = self.samples
        start = time.perf_counter()
        if len(audio) == 0 or is_silent(audio, self.sample_rate):
            text = ""
        elif final and self.transcribe_final is not None:
            timed = self.transcribe_final(audio)
            text, self.confidence = timed.text, utterance_confidence(timed.words)
        else:
            text = self.transcribe(audio)
        self.decode_seconds.append(time.perf_counter() - start)
        return text

    def feed(self, pcm: np.ndarray) -> str | None:
        """Add mono float32 samples; the partial transcript of everything so far when this call decoded, else
        None."""
        self.pieces.append(pcm)
        self.samples += len(pcm)
        # at least as much new audio as the last decode took to run: decoding then keeps pace with a live stream
        # (at the cost of fewer partials) instead of falling further behind with every decode
        last = self.decode_seconds[-1] if self.decode_seconds else 0.0
        due = max(self.interval, int(last * self.sample_rate))
        if self.samples - self.decoded_at < due:
            return None
        self.text = self._decode()
        return self.text

    def finish(self) -> str:
        """The transcript of everything fed (decoded again unless nothing came since the last decode, or, with
        ``transcribe_final``, always: the partials have no confidence)."""
        if self.samples != self.decoded_at or not self.decode_seconds or self.transcribe_final is not None:
            self.text = self._decode(final=True)
        return self.text

    def report(self) -> dict:
        times = self.decode_seconds
        return {"decoder": "re-decode", "interval_s": self.interval_s,
                "audio_s": round(self.samples / self.sample_rate, 3), "decodes": len(times),
                "decode_s_median": round(statistics.median(times), 4) if times else None,
                "decode_s_last": round(times[-1], 4) if times else None}


class CacheAwareStream:
    """Partial transcripts of a live recording with a cache-aware streaming model
    (:class:`duet.asr.streaming.StreamingSession`): each chunk of audio is encoded once, carrying the encoder's
    caches, so a chunk costs the same at the first second as at the tenth minute, and the final transcript is
    ready one chunk after the recording ends. Same interface as :class:`RedecodeStream`."""

    def __init__(self, model):
        self.model = model
        self.session = StreamingSession(model)
        self.samples = 0
        self.text = ""
        self.confidence = None  # the streaming step gives no word confidences
        # one compute time per chunk, not the partials: each partial holds every frame label so far
        self.chunk_seconds: list[float] = []

    def _take(self, partials) -> bool:
        self.chunk_seconds += [p.compute_seconds for p in partials]
        text = partials[-1].text.strip() if partials else self.text
        changed, self.text = text != self.text, text
        return changed

    def feed(self, pcm: np.ndarray) -> str | None:
        """Add mono float32 samples; the partial transcript when a chunk completed and changed it, else None."""
        self.samples += len(pcm)
        return self.text if self._take(self.session.feed(pcm)) else None

    def finish(self) -> str:
        self._take(self.session.finish())
        return self.text

    def report(self) -> dict:
        latency = self.session.latency
        ms = [1000 * s for s in self.chunk_seconds] or [0.0]
        return {"decoder": "cache-aware", "audio_s": round(self.samples / STREAM_SAMPLE_RATE, 3),
                "chunks": len(self.chunk_seconds), "chunk_ms": latency.chunk_ms, "lookahead_ms": latency.lookahead_ms,
                "chunk_compute_ms_median": round(statistics.median(ms), 2), "chunk_compute_ms_max": round(max(ms), 2)}


def stream_decoder_note(settings: ServerSettings, streaming_model=None) -> str:
    """How the WebSocket makes partial transcripts, for /health and each final message."""
    if streaming_model is not None:
        return (f"cache-aware streaming model {settings.streaming_asr_model or 'given'} "
                f"({streaming_latency(streaming_model).describe()}): each chunk encoded once; the final "
                "transcript and the answer come from it")
    return f"re-decode of the whole buffer every {settings.stream_interval:g} s of new audio (offline model)"


CATCH_UP_SECONDS = 10.0  # a stream's decoding this far behind its audio takes all that waits in one piece


class StreamInbox:
    """The audio a WebSocket received and its decoding has not taken yet.

    The socket's reader puts each message here and goes straight back to reading, so the server reads (and
    answers the client's pings) however far decoding is behind: a client sending faster than real time is never
    cut off by a keepalive timeout. What waits is bounded by the stream's length limit (``limit`` samples in all,
    10 min of 16 kHz float32 is 38 MB); while decoding is at most ``CATCH_UP_SECONDS`` behind it takes one message
    at a time (the partials come as they would live), further behind it takes all that waits at once. Audio past
    the limit is not kept: the stream is cut there (``cut``) and its transcript covers the limit's worth."""

    def __init__(self, limit: int):
        self.limit = limit
        self.received = 0
        self.cut = False  # a message went past the limit: its head was kept, the rest dropped
        self.pieces: collections.deque[np.ndarray] = collections.deque()
        self.waiting = 0
        self.closed = False
        self.ready = asyncio.Event()

    def put(self, pcm: np.ndarray) -> None:
        if self.received + len(pcm) > self.limit:
            pcm, self.cut = pcm[:self.limit - self.received], True
            if not len(pcm):
                return
        self.received += len(pcm)
        self.pieces.append(pcm)
        self.waiting += len(pcm)
        self.ready.set()

    def close(self) -> None:
        self.closed = True
        self.ready.set()

    async def take(self) -> np.ndarray | None:
        """The next audio to decode, or None once the stream has ended and all was taken."""
        while not self.pieces:
            if self.closed:
                return None
            self.ready.clear()
            await self.ready.wait()
        if self.waiting > CATCH_UP_SECONDS * STREAM_SAMPLE_RATE:
            pcm = np.concatenate(list(self.pieces))
            self.pieces.clear()
        else:
            pcm = self.pieces.popleft()
        self.waiting -= len(pcm)
        return pcm
