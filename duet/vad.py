"""Voice activity detection: Silero VAD (the ONNX model inside the ``silero-vad`` wheel, MIT) run by ONNX Runtime.

The model reads 16 kHz audio in windows of 512 samples (32 ms). Each call takes the window preceded by the last
64 samples of the previous one (its context) and a recurrent state (2 x batch x 128), and returns the probability
that the window holds speech and the next state. One :class:`SileroVad` (one ONNX session, one thread) serves
every stream of a process: the context and the state travel with each stream (:class:`VadState`), not with the
session, so concurrent streams never mix.

Decisions use two thresholds (hysteresis): a window at or above ``threshold`` is speech; once speech has begun,
only windows below ``threshold - 0.15`` begin a silence, and speech ends ``min_silence_s`` after its last speech
window with the silence still on.
Speech shorter than ``min_speech_s`` (a click, a cough) is no speech. The model is slow to be sure of an onset
(a first short word of the sample's voices can stay below 0.1 for 0.4 s) and its probability decays for 0.1-0.3 s
after the words stop, so the window levels move the boundaries to the sound: speech begins where the probability
or the level started rising, and stops at its last audible window (:class:`SpeechDecider` has the rules). On top
of that:

- :func:`speech_segments`: where the speech of a whole recording lies (sample ranges, padded by ``pad_s``); the
  pipeline's ``--trim-silence`` and its cutting of long recordings at pauses read these.
- :class:`SpeechDetector`: the same decisions on a live stream fed PCM as it arrives; it reports ``speech_start``
  once ``min_speech_s`` of speech has been heard and ``speech_end`` after ``min_silence_s`` of silence, each with
  the place in the stream where the speech began or stopped.

The cost is about 0.25-0.5 ms per 32 ms window on one core (0.8-1.5 % of real time; ``bench/turn_latency.py``
measures it). ``import silero_vad`` would import torch and set its thread count for the whole process, so the
model file is found without importing the package.
"""

from __future__ import annotations

import importlib.util
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import librosa
import numpy as np
import onnxruntime

from duet.errors import DuetError

SAMPLE_RATE = 16000  # the rate the model reads; other rates are resampled first
WINDOW = 512  # samples per model call (32 ms)
CONTEXT = 64  # samples of the previous window the model sees before each window
STATE_SHAPE = (2, 1, 128)
BLOCK_WINDOWS = 1024  # windows a whole recording is read in at a time (33 s; its float64 levels' copy: 4 MiB)
NEG_THRESHOLD_GAP = 0.15  # silence, once speech has begun, is a probability below threshold minus this
NOISE_FLOOR_S = 5.0  # the noise floor is the 10th percentile of the window levels over this long ...
NO_SIGNAL_DB = -90.0  # ... leaving out digital silence (no microphone is that quiet; the floor is its noise)
MIN_FLOOR_WINDOWS = 4  # before this many windows there is no floor to rise above
# The level's rules (see SpeechDecider): an end moves at most MAX_END_SHIFT_S earlier, to the last window AUDIBLE_DB
# above the floor and within TAIL_DB of the speech's loudest; a loud run of LOUD_RUN_S within RESUME_DB of it ends a
# silence (an onset the model has not caught yet; a key click is shorter)
MAX_END_SHIFT_S = 0.25
ONSET_GAP_S = 0.1  # a gap this short in the rising run before an onset does not break it
AUDIBLE_DB = 10.0
TAIL_DB = 35.0
LOUD_RUN_S = 0.09
RESUME_DB = 25.0


class VadSettingsError(DuetError, ValueError):
    """A VAD setting out of range, named by its field."""


def silero_model_path() -> Path:
    """``silero_vad/data/silero_vad.onnx`` of the installed wheel, found without importing the package."""
    spec = importlib.util.find_spec("silero_vad")
    if spec is None or not spec.submodule_search_locations:
        raise DuetError("silero-vad is not installed (pip install silero-vad==6.2.3): voice activity detection "
                        "needs its ONNX model")
    path = Path(list(spec.submodule_search_locations)[0]) / "data" / "silero_vad.onnx"
    if not path.is_file():
        raise DuetError(f"the silero-vad package has no model at {path}")
    return path


@dataclass(frozen=True)
class VadSettings:
    """How speech is told from silence; the same settings serve whole recordings and live streams."""

    threshold: float = 0.5  # a window whose speech probability is at least this is speech
    # Speech begins where the probability rose above ``onset_threshold``, or the level above the noise floor by
    # ``onset_db``, on its way to ``threshold`` (at most ``max_onset_s`` earlier): the model is slow to be sure at an
    # onset (a first short word of the sample's voices stays below 0.1 for up to 0.4 s); room noise stays below 0.1
    onset_threshold: float = 0.1
    onset_db: float = 15.0
    max_onset_s: float = 0.5  # the level moves a start at most this far before the first speech window
    # speech ends this long after its last speech window, a silence (below threshold - 0.15) having begun: the end of
    # a turn (0.5 s: longer than the pauses inside a sentence, 0.3 s)
    min_silence_s: float = 0.5
    min_speech_s: float = 0.25  # less speech than this, before such a silence, is no speech
    pad_s: float = 0.2  # what a segment (or a turn's audio) keeps either side of its speech

    def validate(self) -> "VadSettings":
        for name, ok, rule in (("threshold", 0.0 < self.threshold < 1.0, "in (0, 1)"),
                               ("onset_threshold", 0.0 < self.onset_threshold <= self.threshold, "in (0, threshold]"),
                               ("onset_db", self.onset_db > 0, "> 0"),
                               ("max_onset_s", self.max_onset_s >= 0, ">= 0"),
                               ("min_silence_s", self.min_silence_s > 0, "> 0"),
                               ("min_speech_s", self.min_speech_s >= 0, ">= 0"),
                               ("pad_s", self.pad_s >= 0, ">= 0")):
            if not ok:
                raise VadSettingsError(f"{name} must be {rule}, got {getattr(self, name):g}")
        return self

    @property
    def neg_threshold(self) -> float:
        return max(self.threshold - NEG_THRESHOLD_GAP, 0.01)


@dataclass
class VadState:
    """What one stream carries from window to window: the model's recurrent state and the context samples."""

    state: np.ndarray = field(default_factory=lambda: np.zeros(STATE_SHAPE, dtype=np.float32))
    context: np.ndarray = field(default_factory=lambda: np.zeros(CONTEXT, dtype=np.float32))


class SileroVad:
    """The Silero VAD ONNX session: one intra-op thread, shared by every stream of the process (:meth:`shared`).

    ``seconds`` adds up the time :meth:`probabilities` spent, for cost reports."""

    _shared: "SileroVad | None" = None
    _shared_lock = threading.Lock()

    def __init__(self, path: Path | None = None):
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = 1  # a 32 ms window is too small to share out
        options.inter_op_num_threads = 1
        options.log_severity_level = 3
        self.session = onnxruntime.InferenceSession(str(path or silero_model_path()), options,
                                                    providers=["CPUExecutionProvider"])
        self._rate = np.array(SAMPLE_RATE, dtype=np.int64)
        self.seconds = 0.0

    @classmethod
    def shared(cls) -> "SileroVad":
        """The process's one session, loaded on first use (about 0.1 s)."""
        with cls._shared_lock:
            if cls._shared is None:
                cls._shared = cls()
            return cls._shared

    def step(self, window: np.ndarray, state: VadState) -> float:
        """The speech probability of one window of ``WINDOW`` samples; advances ``state``. Safe from several threads
        at once (ONNX Runtime's sessions are), each with its own ``state``."""
        x = np.concatenate([state.context, window]).astype(np.float32, copy=False)[None, :]
        probability, state.state = self.session.run(None, {"input": x, "state": state.state, "sr": self._rate})
        state.context = x[0, -CONTEXT:]
        return float(probability[0, 0])

    def probabilities(self, audio: np.ndarray) -> np.ndarray:
        """One speech probability per window of 16 kHz ``audio``, from a fresh state; a last partial window is
        padded with zeros. Adds its time to ``seconds`` (read it from one thread only)."""
        start = time.perf_counter()
        state = VadState()
        probabilities = np.array([self.step(window, state) for block in window_blocks(audio) for window in block],
                                 dtype=np.float32)
        self.seconds += time.perf_counter() - start
        return probabilities


def to_vad_rate(audio: np.ndarray, sample_rate: int) -> np.ndarray:
    audio = np.asarray(audio, dtype=np.float32)
    return audio if sample_rate == SAMPLE_RATE else librosa.resample(audio, orig_sr=sample_rate,
                                                                     target_sr=SAMPLE_RATE)


# ------------------------------------------------------------------------------------------------ decisions


@dataclass(frozen=True)
class VadEvent:
    """``speech_start`` or ``speech_end``: ``sample`` is where in the stream the speech began (its first speech
    window) or stopped (the first window of the silence that ended it); ``decided_at`` is how many samples had been
    fed when it was decided."""

    kind: str
    sample: int
    decided_at: int

    def seconds(self, sample_rate: int = SAMPLE_RATE) -> float:
        return round(self.sample / sample_rate, 3)


class SpeechDecider:
    """The speech/silence decisions over a sequence of windows, shared by :func:`speech_segments` and
    :class:`SpeechDetector`. Positions count windows; each window brings its speech probability and, optionally,
    its level in dB (:func:`window_levels`).

    - A window at or above ``threshold`` is speech; the first one opens a candidate, which begins where the
      probability (or the level) started rising to it (``VadSettings``: onset).
    - Silence begins at a window below ``threshold - 0.15`` and lasts until a speech window, or a loud run (for
      ``LOUD_RUN_S``, within ``RESUME_DB`` of the candidate's loudest window and ``onset_db`` above the noise floor:
      an onset the model has not caught yet; a key click is shorter, background noise quieter), ends it; windows
      between the two thresholds carry on whatever was going on.
    - Speech stops after its last speech window, or earlier (by at most ``MAX_END_SHIFT_S``) after its last audible
      window outside a silence: within ``TAIL_DB`` of its loudest window and ``AUDIBLE_DB`` above the floor. The
      model's probability decays for 0.1-0.3 s after the words end, the level falls at once; in noise a quiet last
      sound can sink below the floor's margin, which the cap bounds. Without levels, the probability alone.
    - It ends once ``min_silence_s`` has passed since its last speech window, with the silence still on (counted
      from there, not from where it stopped: a pause inside a sentence never looks longer than it is).

    The noise floor is the 10th percentile of the last ``NOISE_FLOOR_S`` of levels, digital silence left out; a
    recording with digital silence in that time has no noise: its floor is ``NO_SIGNAL_DB``.

    :meth:`push` returns the events a window decided: ``("speech_start", first window)`` once ``min_speech_s`` of
    speech windows were heard in a candidate, ``("speech_end", stop)`` when confirmed speech ends (a candidate that
    never reached ``min_speech_s`` is dropped without events)."""

    def __init__(self, settings: VadSettings, window_s: float = WINDOW / SAMPLE_RATE):
        self.settings = settings.validate()
        self.min_silence = max(1, round(settings.min_silence_s / window_s))
        self.min_speech = max(1, round(settings.min_speech_s / window_s))
        self.max_onset = round(settings.max_onset_s / window_s)
        self.max_end_shift = round(MAX_END_SHIFT_S / window_s)
        self.loud_run_windows = max(1, round(LOUD_RUN_S / window_s))
        self.levels: deque[float] = deque(maxlen=round(NOISE_FLOOR_S / window_s))
        self.index = 0  # windows pushed
        self.rise: int | None = None  # first window of the rising run (see VadSettings) the last window belongs to
        self.rise_gap = 0  # windows since that run last rose
        self.max_rise_gap = round(ONSET_GAP_S / window_s)
        self.loud_run = 0  # windows in a row up to the last loud enough to resume speech
        self.earliest = 0  # where the last speech (or dropped candidate) stopped: new speech cannot begin before
        self.start: int | None = None  # first window of the candidate or confirmed speech
        self.confirmed = False
        self.voiced = 0  # speech windows since ``start``
        self.peak = NO_SIGNAL_DB  # the candidate's loudest speech window
        self.speech_end = 0  # one past the candidate's last speech window
        self.audible_end: int | None = None  # one past its last audible window (see above; None: none yet)
        self.in_silence = False  # a silence has begun after the candidate's speech

    def floor(self) -> float | None:
        """The noise floor: None before ``MIN_FLOOR_WINDOWS`` windows, ``NO_SIGNAL_DB`` where there were as many
        of digital silence (a recording with no noise at all)."""
        if len(self.levels) < MIN_FLOOR_WINDOWS:
            return None
        heard = [level for level in self.levels if level > NO_SIGNAL_DB]
        if len(self.levels) - len(heard) >= MIN_FLOOR_WINDOWS:
            return NO_SIGNAL_DB
        return float(np.percentile(heard, 10))

    def push(self, probability: float, level_db: float | None = None) -> list[tuple[str, int]]:
        s = self.settings
        floor = None if level_db is None else self.floor()
        above = (lambda db: False) if floor is None else (lambda db: level_db >= floor + db)
        if level_db is not None:
            self.levels.append(level_db)
        if probability >= s.onset_threshold or above(s.onset_db):
            self.rise = self.index if self.rise is None else self.rise
            self.rise_gap = 0
        else:  # a rising run survives a short gap (a stop consonant, a breath between two words)
            self.rise_gap += 1
            if self.rise_gap > self.max_rise_gap:
                self.rise = None
        speech = probability >= s.threshold
        if speech and self.start is None:
            self.start = max(self.rise, self.earliest, self.index - self.max_onset)
            self.voiced, self.in_silence, self.audible_end, self.peak = 0, False, None, NO_SIGNAL_DB
        events = []
        if self.start is not None:
            resuming = above(s.onset_db) and level_db >= self.peak - RESUME_DB
            self.loud_run = self.loud_run + 1 if resuming else 0
            self.voiced += speech
            if speech:
                self.speech_end = self.index + 1
                self.peak = max(self.peak, level_db if level_db is not None else NO_SIGNAL_DB)
            if speech or self.loud_run >= self.loud_run_windows:
                self.in_silence = False
            elif probability < s.neg_threshold:
                self.in_silence = True
            if not self.in_silence and above(AUDIBLE_DB) and level_db >= self.peak - TAIL_DB:
                self.audible_end = self.index + 1
            if not self.confirmed and self.voiced >= self.min_speech:
                self.confirmed = True
                events.append(("speech_start", self.start))
        self.index += 1
        # the silence that ends speech counts from its last speech window, not from where the level says it stopped:
        # a pause inside a sentence then never looks longer than it is (the early stop only places the boundary)
        if self.start is not None and self.in_silence and self.index - self.speech_end >= self.min_silence:
            if self.confirmed:
                events.append(("speech_end", self.stop))
            self._reset()
        return events

    @property
    def stop(self) -> int:
        """One past the candidate's last speech window, or its last audible window (see the class docstring)."""
        if self.audible_end is None:  # no level, or never audible: the probability alone
            return self.speech_end
        return max(min(self.audible_end, self.speech_end), self.speech_end - self.max_end_shift)

    @property
    def silence_windows(self) -> int:
        """Windows since the speech stopped, when a silence has begun after it (else 0)."""
        return self.index - self.stop if self.start is not None and self.in_silence else 0

    def _reset(self) -> None:
        self.earliest = self.stop
        self.start, self.confirmed, self.voiced, self.in_silence = None, False, 0, False

    def flush(self) -> list[tuple[str, int]]:
        """The end of the input: confirmed speech still open ends where it stopped (or at the end)."""
        events = [("speech_end", self.stop if self.in_silence else self.index)] if self.confirmed else []
        self._reset()
        return events


def window_blocks(audio: np.ndarray, windows: int = BLOCK_WINDOWS) -> Iterator[np.ndarray]:
    """``audio``'s windows in blocks of at most ``windows`` rows of ``WINDOW`` samples (views of ``audio`` where it
    is contiguous), a last partial window zero-padded in a block of its own: a whole recording is never copied (a
    600 s upload's padded float32 and float64 copies took +105 MiB at the peak, now +2)."""
    whole = len(audio) // WINDOW
    for first in range(0, whole, windows):
        yield audio[first * WINDOW:min(whole, first + windows) * WINDOW].reshape(-1, WINDOW)
    if len(audio) > whole * WINDOW:
        last = np.zeros((1, WINDOW), dtype=np.float32)
        last[0, :len(audio) - whole * WINDOW] = audio[whole * WINDOW:]
        yield last


def window_levels(audio: np.ndarray) -> np.ndarray:
    """The level (dB of the mean square) of each window of 16 kHz ``audio``; a last partial window is zero-padded."""
    power = [np.mean(block.astype(np.float64) ** 2, axis=1) for block in window_blocks(audio)]
    return 10 * np.log10((np.concatenate(power) if power else np.zeros(0)) + 1e-10)


def segments_from_probabilities(probabilities: np.ndarray, settings: VadSettings, length: int,
                                sample_rate: int = SAMPLE_RATE,
                                levels: np.ndarray | None = None) -> list[tuple[int, int]]:
    """Speech ranges ``[start, end)`` in samples at ``sample_rate`` of a recording of ``length`` samples, from its
    window probabilities (and levels, for the onsets): each padded by ``pad_s`` (clipped to the recording),
    overlapping ones merged."""
    decider = SpeechDecider(settings)
    bounds, start = [], None
    for i, probability in enumerate(probabilities):
        for kind, window in decider.push(float(probability), None if levels is None else float(levels[i])):
            if kind == "speech_start":
                start = window
            else:
                bounds.append((start, window))
    for _, window in decider.flush():
        bounds.append((start, window))
    scale = WINDOW * sample_rate / SAMPLE_RATE
    pad = int(round(settings.pad_s * sample_rate))
    merged: list[tuple[int, int]] = []
    for first, last in bounds:
        first, last = max(0, int(first * scale) - pad), min(length, int(last * scale) + pad)
        if merged and first <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], last))
        else:
            merged.append((first, last))
    return merged


def speech_segments(audio: np.ndarray, sample_rate: int, settings: VadSettings = VadSettings(),
                    vad: SileroVad | None = None) -> list[tuple[int, int]]:
    """Where the speech of ``audio`` (mono float32 at ``sample_rate``) lies: sample ranges ``[start, end)`` at
    ``sample_rate``, padded by ``settings.pad_s``, in order, not overlapping; empty when it holds no speech."""
    if len(audio) == 0:
        return []
    audio16 = to_vad_rate(audio, sample_rate)
    probabilities = (vad or SileroVad.shared()).probabilities(audio16)
    return segments_from_probabilities(probabilities, settings, len(audio), sample_rate, window_levels(audio16))


class SpeechDetector:
    """Speech start and end on a live 16 kHz stream: :meth:`feed` takes samples as they arrive (any count; the
    rest of a window waits for the next call) and returns the :class:`VadEvent` s they decided.

    ``speech_start`` comes once ``min_speech_s`` of speech has been heard (its ``sample`` is where that speech
    began), ``speech_end`` once ``min_silence_s`` of silence followed (its ``sample`` is where the speech stopped).
    :attr:`in_speech` says whether speech has started and not ended; :attr:`silence_samples` how long ago the speech
    stopped, once a silence has begun after it (else 0), and :attr:`stop_sample` where it stopped."""

    def __init__(self, settings: VadSettings = VadSettings(), vad: SileroVad | None = None):
        self.decider = SpeechDecider(settings)
        self.settings = settings
        self.vad = vad or SileroVad.shared()
        self.state = VadState()
        self.rest = np.zeros(0, dtype=np.float32)
        self.samples = 0  # fed so far
        self.windows_seconds = 0.0  # CPU time spent deciding this stream's windows (the model and the rules)

    @property
    def in_speech(self) -> bool:
        return self.decider.confirmed

    @property
    def silence_samples(self) -> int:
        return self.decider.silence_windows * WINDOW

    @property
    def speech_start_sample(self) -> int | None:
        return None if self.decider.start is None else self.decider.start * WINDOW

    @property
    def stop_sample(self) -> int:
        return self.decider.stop * WINDOW

    def feed(self, pcm: np.ndarray) -> list[VadEvent]:
        self.samples += len(pcm)
        data = np.concatenate([self.rest, np.asarray(pcm, dtype=np.float32)]) if len(self.rest) else \
            np.asarray(pcm, dtype=np.float32)
        whole = len(data) // WINDOW * WINDOW
        self.rest = data[whole:].copy()
        base = self.samples - len(data)  # where ``data`` begins in the stream
        events = []
        started = time.thread_time()  # CPU time: what the windows cost, however busy the machine
        levels = window_levels(data[:whole]) if whole else ()
        for i, at in enumerate(range(0, whole, WINDOW)):
            probability = self.vad.step(data[at:at + WINDOW], self.state)
            for kind, window in self.decider.push(probability, float(levels[i])):
                events.append(VadEvent(kind, window * WINDOW, base + at + WINDOW))
        self.windows_seconds += time.thread_time() - started
        return events

    def flush(self) -> list[VadEvent]:
        """The end of the stream: speech still open ends (where it stopped, or at the last window)."""
        return [VadEvent(kind, window * WINDOW, self.samples) for kind, window in self.decider.flush()]


# ------------------------------------------------------------------------------------------------ energy


def energy_speech_bounds(audio: np.ndarray, sample_rate: int, margin_s: float, top_db: float = 35.0) -> tuple[int, int]:
    """The energy fallback (what ``--trim-silence`` used before the VAD; ``bench/silence_ab.py`` compares the two):
    from ``margin_s`` before the first sound to ``margin_s`` after the last, sound being within ``top_db`` of the
    recording's peak; the whole range when nothing stands out."""
    if len(audio) == 0:
        return 0, 0
    _, (start, end) = librosa.effects.trim(audio, top_db=top_db, frame_length=1024, hop_length=256)
    margin = int(margin_s * sample_rate)
    return max(0, int(start) - margin), min(len(audio), int(end) + margin)
