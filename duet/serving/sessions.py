"""The WebSocket's sessions (``/v1/stream``): 16 kHz mono PCM16 little-endian in binary messages, and a text
message ``{"type": "end"}`` when the recording ends.

:class:`StreamSession` (one recording): ``{"type": "partial", ...}`` as audio arrives and one ``{"type": "final",
...}`` with the transcript and the answer (partials from :class:`~duet.serving.streams.RedecodeStream` or
:class:`~duet.serving.streams.CacheAwareStream`). The socket is read apart from the decoding
(:class:`~duet.serving.streams.StreamInbox`), so a client sending faster than real time keeps answering pings and
gets its final; a socket silent for ``stream_idle_seconds`` gets its final and is closed, and one that goes past
``max_audio_seconds`` gets the final of the audio up to the limit (``"ended_by": "limit: ..."``) and is closed with
1009. Silero VAD (``duet.vad``) listens too: ``{"type": "speech_start" | "speech_end", "turn", "at_s",
"decided_at_s"}`` say where speech began and stopped.

:class:`TurnsSession` (``?turns=true`` or ``ServerSettings.turns``): each time the speaker stops, the final transcript
and answer of that turn are sent (``"turn": n``) and the socket listens for the next, until ``{"type": "end"}``,
answered by ``{"type": "done"}``. Both read the socket with the one loop :func:`receive_audio`.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Awaitable, Callable

import numpy as np
from fastapi import WebSocket, WebSocketDisconnect

from duet.asr.confidence import utterance_confidence
from duet.asr.streaming import pcm16_samples
from duet.pipeline import VoicePipeline, answer_fields, is_silent
from duet.serving.errors import RequestError, internal_error
from duet.serving.responses import spoken
from duet.serving.service import Service
from duet.serving.streams import STREAM_SAMPLE_RATE, CacheAwareStream, RedecodeStream, StreamInbox
from duet.serving.turns import TurnEvent, TurnTaker
from duet.vad import SAMPLE_RATE as VAD_SAMPLE_RATE, SpeechDetector, VadEvent
from slm.generation import ContextLengthError


def vad_message(kind: str, turn: int, at_s: float | None, decided_at_s: float | None) -> dict:
    return {"type": kind, "turn": turn, "at_s": at_s, "decided_at_s": decided_at_s}


def vad_event_message(event: VadEvent, turn: int) -> dict:
    return vad_message(event.kind, turn, event.seconds(), round(event.decided_at / VAD_SAMPLE_RATE, 3))


def check_end_message(message: dict) -> None:
    """A WebSocket text message must be ``{"type": "end"}`` (audio goes in binary messages); else a 400."""
    try:
        control = json.loads(message.get("text") or "")
    except json.JSONDecodeError:
        control = None
    if not isinstance(control, dict) or control.get("type") != "end":
        raise RequestError(400, 'text messages: only {"type": "end"} is understood (audio goes in binary messages)')


def answer_or_why_not(pipeline: VoicePipeline, transcript: str, confidence: float | None
                      ) -> tuple[dict, bool, str | None]:
    """``pipeline.answer_with_calls`` as a final's fields (``duet.pipeline.answer_fields``), except that a transcript too long
    for the language model's context (3 min of speech fill the demo model's 448 positions) gets no answer and a note
    saying why: a stream's final never loses its transcript for want of an answer."""
    try:
        answer, understood, note = pipeline.answer_with_calls(transcript, confidence)
    except ContextLengthError as e:
        return answer_fields(None), False, f"language model skipped: {e}"
    return answer_fields(answer), understood, note


async def receive_audio(websocket: WebSocket, idle_seconds: float, take: Callable[[np.ndarray], Awaitable[bool]],
                        watched: asyncio.Future | None = None) -> str:
    """Read the socket's messages until the stream ends, giving each binary message's samples to ``take``, and say
    why it ended: ``"end"`` (the client's ``{"type": "end"}``), ``"idle"`` (no message for ``idle_seconds``),
    ``"limit"`` (``take`` returned False: what follows is not read) or ``"disconnect"``. A bad message is a
    ``RequestError``; a failure of ``watched`` (work going on beside the reading) is raised here as soon as it
    happens."""
    while True:
        receiving = asyncio.ensure_future(websocket.receive())
        done, _ = await asyncio.wait({receiving} | ({watched} if watched is not None else set()),
                                     timeout=idle_seconds, return_when=asyncio.FIRST_COMPLETED)
        if watched in done:
            receiving.cancel()
            watched.result()  # raises what failed; work that ended early has nothing more to take
        if receiving not in done:
            receiving.cancel()
            return "idle"
        message = receiving.result()
        if message["type"] == "websocket.disconnect":
            return "disconnect"
        if message.get("bytes") is not None:
            data = message["bytes"]
            if len(data) % 2:
                raise RequestError(400, "audio: a binary message must hold whole 16-bit samples (PCM16 LE)")
            if not await take(pcm16_samples(data)):
                return "limit"
            continue
        check_end_message(message)
        return "end"


class SocketSession:
    """What both sessions share: the service they answer with, messages sent one at a time, model calls on the
    inference thread (waiting for a slot: the audio queues in the connection meanwhile), the tasks they start
    (cancelled when the session ends), and how a failed session ends: the client hears why (a refusal closes with
    1008, or 1009 for a stream over the limit; a model failure 1011) and the server goes on serving."""

    def __init__(self, websocket: WebSocket, service: Service, speak: bool):
        self.websocket, self.service, self.speak = websocket, service, speak
        self.pipeline, self.worker, self.settings = service.pipeline, service.worker, service.settings
        self.streaming_model, self.stream_note = service.streaming_model, service.stream_note
        self.send_lock = asyncio.Lock()
        self.tasks: set[asyncio.Task] = set()

    async def serve(self) -> None:
        raise NotImplementedError

    async def run(self) -> None:
        try:
            await self.serve()
        except (RequestError, ContextLengthError) as e:
            await self.send({"type": "error", "error": str(e)})
            await self.websocket.close(code=1009 if getattr(e, "status", None) == 413 else 1008)
        except WebSocketDisconnect:
            return
        except Exception as e:  # a model or decoding failure: the client hears why, the server keeps serving
            await self.send({"type": "error", "error": internal_error(e)})
            await self.websocket.close(code=1011)
        finally:
            for task in list(self.tasks):
                task.cancel()

    def spawn(self, coroutine) -> asyncio.Task:
        task = asyncio.ensure_future(coroutine)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    async def send(self, message: dict) -> None:
        async with self.send_lock:
            await self.websocket.send_json(message)

    async def on_worker(self, fn: Callable, *args):
        async with self.worker.slot(wait=True):
            return await self.worker.run(fn, *args)


class StreamSession(SocketSession):
    """One recording over the WebSocket: partials as it arrives, its final (transcript, answer) when it ends."""

    def __init__(self, websocket: WebSocket, service: Service, speak: bool):
        super().__init__(websocket, service, speak)
        self.detector = SpeechDetector(self.settings.vad_settings())  # speech_start / speech_end messages
        self.said = 0  # speech starts heard
        self.inbox = StreamInbox(int(self.settings.max_audio_seconds * STREAM_SAMPLE_RATE))
        self.decoder: RedecodeStream | CacheAwareStream | None = None

    async def serve(self) -> None:
        pipeline, settings = self.pipeline, self.settings
        if self.streaming_model is not None:  # the session sets the model's streaming parameters: on its thread
            self.decoder = await self.on_worker(CacheAwareStream, self.streaming_model)
        else:
            self.decoder = RedecodeStream(lambda audio: pipeline.transcribe(audio)[0], pipeline.sample_rate,
                                          settings.stream_interval,
                                          transcribe_final=lambda audio: pipeline.transcribe_timed(audio)[0])
        decoding = self.spawn(self.decode_as_audio_arrives())
        ended_by = await receive_audio(self.websocket, settings.stream_idle_seconds, self.put, decoding)
        if ended_by == "disconnect":
            return
        self.inbox.close()
        await decoding
        await self.send(await self.final(ended_by))
        # 1009 (too big): a client still sending learns why the socket closed under it
        await self.websocket.close(**({"code": 1009, "reason": "stream longer than the limit"}
                                      if ended_by == "limit" else {}))

    async def put(self, pcm: np.ndarray) -> bool:
        """Keep a message's audio for the decoding; False once the stream reached its length limit."""
        self.inbox.put(pcm)
        return not self.inbox.cut

    async def decode_as_audio_arrives(self) -> None:
        """The VAD and the decoder take the audio as it comes, one piece (or, behind by more than
        ``CATCH_UP_SECONDS``, all that waits, as one) at a time, while the socket goes on reading."""
        while (pcm := await self.inbox.take()) is not None:
            for event in await asyncio.to_thread(self.detector.feed, pcm):
                self.said += event.kind == "speech_start"
                await self.send(vad_event_message(event, self.said))
            partial = await self.on_worker(self.decoder.feed, pcm)
            if partial is not None:
                await self.send({"type": "partial", "text": partial,
                                 "audio_s": round(self.decoder.samples / STREAM_SAMPLE_RATE, 3)})

    async def final(self, ended_by: str) -> dict:
        """The final message: the transcript of all the audio taken, and its answer."""
        settings, decoder = self.settings, self.decoder
        ended = time.perf_counter()
        for event in self.detector.flush():
            await self.send(vad_event_message(event, self.said))
        async with self.worker.slot(wait=True):
            transcript = await self.worker.run(decoder.finish)
            asr_s = time.perf_counter() - ended
            answer, understood, note = await self.worker.run(answer_or_why_not, self.pipeline, transcript,
                                                             decoder.confidence)
        note = note or (None if transcript else "no speech heard; language model skipped")
        response = answer["response"]
        final = {"type": "final", "transcript": transcript, **answer, "note": note,
                 "confidence": decoder.confidence, "understood": understood,
                 "latency_s": {"asr_final": round(asr_s, 4),
                               **({"slm": round(time.perf_counter() - ended - asr_s, 4)} if understood else {})},
                 "stream": {**decoder.report(), "how": self.stream_note}}
        if ended_by == "idle":
            final["ended_by"] = f"idle: no message for {settings.stream_idle_seconds:g} s"
        elif ended_by == "limit":
            final["ended_by"] = (f"limit: the stream is longer than the limit of {settings.max_audio_seconds:g} s; "
                                 "the transcript covers that much, the audio after it was not read")
        if self.speak and response:
            final.update(await spoken(response))
        final["latency_s"]["after_end"] = round(time.perf_counter() - ended, 4)
        return final


class TurnsSession(SocketSession):
    """One hands-free WebSocket (``/v1/stream?turns=true``): :class:`duet.serving.turns.TurnTaker` cuts the stream
    into turns and each turn is answered as soon as it ends, while the socket goes on listening.

    Messages out: ``speech_start`` and ``speech_end`` (turn, where in the stream, when decided), ``partial`` (turn,
    text), ``final`` (turn, transcript, response, latencies: ``after_end`` counts from the moment the VAD decided the
    turn had ended), ``error`` (turn, why: that turn failed, the session goes on) and, after ``{"type": "end"}``,
    ``done`` (turns answered, audio heard, VAD time) before the socket closes. Finals go out in turn order.

    With the offline model, a turn is transcribed and answered during the silence that ends it: once the turn's
    audio can no longer change unless the speaker goes on (the ``pause`` event, ``pad_s`` into the silence), the
    answer is computed; speech resuming cancels it, and the turn's end sends it (``"speculative": true``) instead
    of starting the work then. Partials re-decode the open turn every ``stream_interval`` seconds of new audio,
    one decode in flight at a time, none once a silence has begun (and one still waiting for the model is dropped
    when the answer starts: it would only delay it), none when every slot of the queue is taken (answers wait for
    one). With a cache-aware model (``streaming_model``), each turn streams through its own
    :class:`CacheAwareStream`, finished when the turn ends. A turn longer than ``max_audio_seconds`` ends there and
    the speech goes on as the next turn (``"forced_end": true``); the session itself has no length limit.
    """

    def __init__(self, websocket: WebSocket, service: Service, speak: bool):
        super().__init__(websocket, service, speak)
        self.taker = TurnTaker(self.settings.vad_settings(), max_turn_s=self.settings.max_audio_seconds)
        self.interval = int(self.settings.stream_interval * STREAM_SAMPLE_RATE)
        self.last_final: asyncio.Task | None = None
        self.speculation: tuple[int, tuple[int, int], asyncio.Task] | None = None
        self.answered = 0
        self.final_sent = 0  # the last turn whose final (or error) is going out
        self.partials: dict[int, int] = {}  # partials sent per turn
        self._new_turn()

    def _new_turn(self) -> None:
        self.pieces: list[np.ndarray] = []  # the open turn's audio so far (offline model: for its partials)
        self.turn_samples = 0
        self.partial_at = 0  # turn samples at the last partial decode
        self.partial_task: asyncio.Task | None = None
        self.turn_stream: CacheAwareStream | None = None

    def transcribe(self, audio: np.ndarray) -> str:
        """A partial's text (no word confidences: they cost 4-11 % more CPU)."""
        return "" if len(audio) == 0 or is_silent(audio, self.pipeline.sample_rate) else \
            self.pipeline.transcribe(audio)[0]

    def answer(self, audio: np.ndarray) -> dict:
        """Transcript, its confidence and the answer of a turn's audio (on the inference thread)."""
        start = time.perf_counter()
        if len(audio) == 0 or is_silent(audio, self.pipeline.sample_rate):
            transcript, confidence = "", None
        else:
            timed, _ = self.pipeline.transcribe_timed(audio)
            transcript, confidence = timed.text, utterance_confidence(timed.words)
        return self._respond(transcript, confidence, time.perf_counter() - start)

    def finish_stream(self, stream: CacheAwareStream) -> dict:
        start = time.perf_counter()
        return self._respond(stream.finish(), None, time.perf_counter() - start)  # streaming: no word confidences

    def _respond(self, transcript: str, confidence: float | None, asr_s: float) -> dict:
        """The pipeline's answer to a transcript (duet.pipeline: a low-confidence one gets the apology, and the
        language model is not asked)."""
        start = time.perf_counter()
        answer, understood, note = answer_or_why_not(self.pipeline, transcript, confidence)
        return {"transcript": transcript, **answer, "asr_s": asr_s, "confidence": confidence,
                "understood": understood, "note": note,
                "slm_s": time.perf_counter() - start if understood else None}

    async def serve(self) -> None:
        if await receive_audio(self.websocket, self.settings.stream_idle_seconds, self.take) == "disconnect":
            return
        # the client ended (or went quiet for stream_idle_seconds): its turns are answered and the socket closed
        await self.handle(self.taker.finish(), time.perf_counter())
        if self.last_final is not None:
            await self.last_final
        detector = self.taker.detector
        await self.send({"type": "done", "turns": self.answered,
                         "audio_s": round(detector.samples / STREAM_SAMPLE_RATE, 3),
                         "vad_s": round(detector.windows_seconds, 4)})
        await self.websocket.close()

    async def take(self, pcm: np.ndarray) -> bool:
        """The turns' events of one message's audio, handled before the next message is read."""
        events = await asyncio.to_thread(self.taker.feed, pcm)
        await self.handle(events, time.perf_counter())
        return True

    async def handle(self, events: list[TurnEvent], decided: float) -> None:
        """React to the events of one piece of audio; ``decided`` is when the VAD had decided them."""
        for event in events:
            if event.kind == "speech_start":
                self._new_turn()
                if self.streaming_model is not None:  # the session sets the model's streaming parameters: on its thread
                    self.turn_stream = await self.on_worker(CacheAwareStream, self.streaming_model)
                await self.send(vad_message("speech_start", event.turn, event.at_s, event.decided_s))
            elif event.kind == "audio":
                await self.on_audio(event)
            elif event.kind == "pause" and self.streaming_model is None:
                self.cancel_speculation()
                if self.partial_task is not None:  # a partial still waiting for the model would delay the answer
                    self.partial_task.cancel()
                self.speculation = (event.turn, event.bounds, self.spawn(self.on_worker(self.answer, event.audio)))
            elif event.kind == "resume":
                self.cancel_speculation()
            elif event.kind == "speech_end":
                await self.send(vad_message("speech_end", event.turn, event.at_s, event.decided_s))
                self.end_turn(event, decided)

    def cancel_speculation(self) -> None:
        if self.speculation is not None:
            self.speculation[2].cancel()
            self.speculation = None

    async def on_audio(self, event: TurnEvent) -> None:
        if self.turn_stream is not None:
            partial = await self.on_worker(self.turn_stream.feed, event.audio)
            if partial is not None:
                await self.send({"type": "partial", "turn": event.turn, "text": partial,
                                 "audio_s": round(self.turn_stream.samples / STREAM_SAMPLE_RATE, 3)})
            return
        self.pieces.append(event.audio)
        self.turn_samples += len(event.audio)
        due = self.turn_samples - self.partial_at >= self.interval
        idle = self.partial_task is None or self.partial_task.done()
        if due and idle and self.taker.detector.silence_samples == 0:  # none once a silence has begun
            audio = np.concatenate(self.pieces)
            self.pieces, self.partial_at = [audio], self.turn_samples
            self.partial_task = self.spawn(self.send_partial(event.turn, audio))

    async def send_partial(self, turn: int, audio: np.ndarray) -> None:
        try:
            async with self.worker.slot():  # a partial never waits for a slot: when the server is busy, none
                text = await self.worker.run(self.transcribe, audio)
        except RequestError:
            return
        if turn > self.final_sent:  # never after the turn's final
            self.partials[turn] = self.partials.get(turn, 0) + 1
            await self.send({"type": "partial", "turn": turn, "text": text,
                             "audio_s": round(len(audio) / STREAM_SAMPLE_RATE, 3)})

    def end_turn(self, event: TurnEvent, decided: float) -> None:
        speculative = False
        if self.turn_stream is not None:
            work = self.spawn(self.on_worker(self.finish_stream, self.turn_stream))
            report = self.turn_stream.report()
        else:
            if self.speculation is not None and self.speculation[:2] == (event.turn, event.bounds):
                work, speculative = self.speculation[2], True
                self.speculation = None
            else:
                self.cancel_speculation()
                work = self.spawn(self.on_worker(self.answer, event.audio))
            report = {"decoder": "re-decode", "interval_s": self.settings.stream_interval,
                      "audio_s": round(len(event.audio) / STREAM_SAMPLE_RATE, 3)}
        self.last_final = self.spawn(self.deliver(event, work, speculative, {**report, "how": self.stream_note},
                                                   self.last_final, decided))
        self._new_turn()

    async def deliver(self, event: TurnEvent, work: asyncio.Task, speculative: bool, stream: dict,
                      previous: asyncio.Task | None, decided: float) -> None:
        """Send turn ``event.turn``'s final once its answer is ready and the turn before it has been sent."""
        try:
            result = await work
        except asyncio.CancelledError:
            raise
        except Exception as e:  # a model failure: this turn's error, and the session goes on
            result = {"error": internal_error(e)}
        if previous is not None:
            await asyncio.wait([previous])
        if "error" in result:
            self.final_sent = event.turn
            await self.send({"type": "error", "turn": event.turn, "error": result["error"]})
            return
        transcript, response = result["transcript"], result["response"]
        self.final_sent = event.turn  # no partial of this turn from here on
        if stream["decoder"] == "re-decode":
            stream["partials"] = self.partials.pop(event.turn, 0)
        note = None if transcript else "no speech heard; language model skipped"
        if transcript and not result["understood"]:  # not heard surely enough, or too long for the language model
            note = result["note"] if result["response"] is None else (
                f"confidence {result['confidence']:.2f} is below {self.pipeline.settings.min_confidence:g}: "
                "not understood")
        final = {"type": "final", "turn": event.turn, "transcript": transcript, "response": response,
                 "tool_calls": result["tool_calls"], "withheld": result["withheld"], "confidence": result["confidence"],
                 "understood": result["understood"], "note": note,
                 "speech_end_s": event.at_s, "forced_end": event.forced, "speculative": speculative,
                 "latency_s": {"asr_final": round(result["asr_s"], 4),
                               **({"slm": round(result["slm_s"], 4)} if result["slm_s"] is not None else {})},
                 "stream": stream}
        if self.speak and response:
            final.update(await spoken(response))
        final["latency_s"]["after_end"] = round(time.perf_counter() - decided, 4)
        self.answered += 1
        await self.send(final)
