"""Turns of a hands-free conversation, cut from a live 16 kHz stream by voice activity detection (``duet.vad``).

:class:`TurnTaker` is fed PCM as it arrives and says, as :class:`TurnEvent` s, when a turn's speech starts, which
samples belong to the open turn, when a pause begins inside it, when speech resumes, and when the turn ends
(``min_silence_s`` of silence after the speech), with the turn's audio: from ``pad_s`` before its speech to ``pad_s``
after. It does no input or output of its own (the server's WebSocket drives it; tests feed it arrays).

A pause event carries the audio the turn would have if it ended there: once ``pad_s`` of silence has passed, those
samples cannot change unless speech resumes (a ``resume`` event). A server can thus transcribe and answer during
the rest of the silence and send the answer the moment the turn ends; a ``speech_end`` whose ``bounds`` equal the
last pause's is the same audio.

Memory stays bounded: between turns only a pre-roll of ``pad_s`` (and an unconfirmed start of speech) is kept, and a
turn longer than ``max_turn_s`` ends there (``forced``), the speech going on as the next turn.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from duet.vad import SAMPLE_RATE, WINDOW, SileroVad, SpeechDetector, VadSettings, VadSettingsError


@dataclass(frozen=True)
class TurnEvent:
    """``speech_start``, ``audio``, ``pause``, ``resume`` or ``speech_end`` of turn ``turn`` (counted from 1).

    ``at_s``: where the speech started (``speech_start``) or stopped (``speech_end``), in seconds from the start of
    the stream; ``decided_s``: how much of the stream had arrived when it was decided. ``audio``: the turn's new
    samples (``audio``) or all its samples (``pause``, ``speech_end``), whose place in the stream is ``bounds``."""

    kind: str
    turn: int
    audio: np.ndarray | None = None
    bounds: tuple[int, int] | None = None
    at_s: float | None = None
    decided_s: float | None = None
    forced: bool = False


class TurnTaker:
    """Cuts a live stream into turns; see the module docstring. :meth:`feed` takes mono float32 samples at 16 kHz,
    :meth:`finish` ends the stream (an open turn ends with it)."""

    def __init__(self, settings: VadSettings = VadSettings(), vad: SileroVad | None = None,
                 max_turn_s: float = 600.0):
        settings.validate()
        if settings.pad_s > settings.min_silence_s:
            raise VadSettingsError(f"pad_s ({settings.pad_s:g}) must be <= min_silence_s ({settings.min_silence_s:g}): "
                                   "a turn's audio ends pad_s into the silence that ends it")
        self.settings = settings
        self.detector = SpeechDetector(settings, vad)
        self.pad = int(round(settings.pad_s * SAMPLE_RATE))
        self.max_turn = int(max_turn_s * SAMPLE_RATE)
        self.kept = np.zeros(0, dtype=np.float32)  # the stream's samples from ``kept_from`` on
        self.kept_from = 0
        self.turn = 0  # turns started so far
        self.open = False
        self.first = 0  # where the open turn's audio begins in the stream
        self.sent = 0  # the open turn's samples given out in ``audio`` events end here
        self.pause_bounds: tuple[int, int] | None = None  # of the pause event given in the current silence

    @property
    def samples(self) -> int:
        return self.kept_from + len(self.kept)

    def _slice(self, first: int, last: int) -> np.ndarray:
        return self.kept[max(first, self.kept_from) - self.kept_from:last - self.kept_from].copy()

    def _end(self, events: list[TurnEvent], stopped_at: int, forced: bool = False) -> None:
        last = max(self.first, min(stopped_at + self.pad, self.samples))
        events.append(TurnEvent("speech_end", self.turn, self._slice(self.first, last), (self.first, last),
                                at_s=round(stopped_at / SAMPLE_RATE, 3),
                                decided_s=round(self.samples / SAMPLE_RATE, 3), forced=forced))
        self.open, self.pause_bounds = False, None

    def _start(self, events: list[TurnEvent], speech_at: int, pad: bool = True) -> None:
        self.turn += 1
        self.open = True
        self.first = self.sent = max(0, speech_at - (self.pad if pad else 0), self.kept_from)
        events.append(TurnEvent("speech_start", self.turn, at_s=round(speech_at / SAMPLE_RATE, 3),
                                decided_s=round(self.samples / SAMPLE_RATE, 3)))

    def feed(self, pcm: np.ndarray) -> list[TurnEvent]:
        pcm = np.asarray(pcm, dtype=np.float32)
        self.kept = np.concatenate([self.kept, pcm]) if len(self.kept) else pcm.copy()
        events: list[TurnEvent] = []
        for vad_event in self.detector.feed(pcm):
            if vad_event.kind == "speech_start":
                self._start(events, vad_event.sample)
            elif self.open:  # a speech_end; none is open after a forced end that the speech outlived
                self._end(events, vad_event.sample)
        if self.open:
            self._pause_or_resume(events)
            if self.samples > self.sent:
                events.append(TurnEvent("audio", self.turn, self._slice(self.sent, self.samples),
                                        (self.sent, self.samples)))
                self.sent = self.samples
            if self.samples - self.first >= self.max_turn:  # too long: the speech goes on as the next turn
                self._end(events, self.samples, forced=True)
                self._start(events, self.samples, pad=False)
        self._forget()
        return events

    def _pause_or_resume(self, events: list[TurnEvent]) -> None:
        silence = self.detector.silence_samples
        stop = self.detector.stop_sample
        if self.pause_bounds is not None and (silence == 0 or self.pause_bounds[1] != stop + self.pad):
            events.append(TurnEvent("resume", self.turn))
            self.pause_bounds = None
        if self.pause_bounds is None and silence >= max(self.pad, WINDOW):
            self.pause_bounds = (self.first, stop + self.pad)
            events.append(TurnEvent("pause", self.turn, self._slice(*self.pause_bounds), self.pause_bounds,
                                    decided_s=round(self.samples / SAMPLE_RATE, 3)))

    def _forget(self) -> None:
        """Drop what no turn can need: before the open turn, or before the pre-roll of a speech start to come."""
        if self.open:
            keep_from = self.first
        else:
            candidate = self.detector.speech_start_sample
            processed = self.detector.samples - len(self.detector.rest)
            keep_from = (candidate if candidate is not None else processed) - self.pad
        drop = max(0, keep_from - self.kept_from)
        if drop:
            self.kept = self.kept[drop:]
            self.kept_from += drop

    def finish(self) -> list[TurnEvent]:
        """The end of the stream: an open turn ends where its silence began (or at the end)."""
        events: list[TurnEvent] = []
        for vad_event in self.detector.flush():
            if self.open:
                self._end(events, vad_event.sample)
        if self.open:
            self._end(events, self.samples)
        return events
