"""Voice -> transcript -> response: a NeMo CTC model feeding an instruction-tuned GPT-2.

The two models stay decoupled (the report's figure 4-1): the transcript is handed to the language
model as an Alpaca instruction. Models load once; each file then costs audio loading, ASR and
generation, timed separately. Long recordings are cut at pauses (where Silero VAD hears no speech:
``duet.vad``) into chunks of at most ``max_chunk_seconds`` so memory stays bounded whatever the file's length.
Everything a pipeline is told is one :class:`PipelineSettings`, built once where the request comes in (the command
line: ``duet.cli.cli_args``; a server request replaces its language-model decoding).

With ``stream=True`` (a model trained with ``configs/fastconformer_small_streaming.yaml``) the ASR runs
through a ``duet.asr.streaming.StreamingSession`` instead: the audio goes in 100 ms pieces, each chunk that
completes yields a partial transcript (handed to ``on_partial`` as it arrives), and the result carries the
look-ahead, the first partial's time and the per-chunk compute times. A long recording streams whole,
without the cutting at pauses, and :meth:`VoicePipeline.run_live` takes a live source (pieces of samples as
they arrive, e.g. raw PCM from a pipe): features, their normalisation and the encoder's caches are all
computed incrementally, so memory does not grow with the length.
"""

from __future__ import annotations

import copy
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

from duet.asr.batching import PIPELINE_BATCHING, OfflineBatching
from duet.asr.decoding import CtcDecoder, DecodingSettings, GreedySettings, build_decoder
from duet.asr.inference import AsrInputError, load_asr_model, load_audio, transcribe_audio, transcribe_with_words
from duet.asr.onnx_engine import load_onnx_model
from duet.asr.streaming import (StreamingSession, audio_pieces, check_streaming_model, session_partials,
                                streaming_report)
from duet.asr.words import TimedTranscript, Word
from duet.asr.confidence import (DEFAULT_MIN_CONFIDENCE, NOT_UNDERSTOOD_REPLY, check_min_confidence, is_understood,
                             utterance_confidence)
from duet.demo.models import DEMO_ASR_MODEL, default_slm_model
from duet.io import audio_file_problem
from duet.data.lexicon import english_words
from duet.text import request_text
from duet.vad import VadSettings, speech_segments
from slm.generation import GenerationSettings, load_model, respond_with_calls
from slm.tool_calls import ExecutedText

# A recording whose loudest 50 ms stays below this RMS (about -50 dBFS) holds no speech worth decoding.
SILENCE_RMS = 0.003
# Speech in a whole recording, for the cuts at pauses and --trim-silence: a pause of 0.3 s is a place to cut (shorter
# dips of the model's probability inside a sentence are not), and 0.1 s of speech counts (a short word alone, e.g.
# "six"); segments are used unpadded (the callers add margins).
RECORDING_VAD = VadSettings(min_silence_s=0.3, min_speech_s=0.1, pad_s=0.0)


@dataclass(frozen=True)
class PipelineSettings:
    """What a :class:`VoicePipeline` loads and how it answers: built once at the boundary (the command line:
    ``duet.cli.cli_args.pipeline_settings_from_args``), typed and validated; everything below takes it.

    The model defaults are the models tools/demo.py trains, the language model the Whisper-start preset's once
    it exists (``duet.demo.models``).
    """

    asr_model: Path = DEMO_ASR_MODEL  # NeMo .nemo (engine onnx: its export, or the folder holding it)
    slm_model: Path = field(default_factory=default_slm_model)  # Hugging Face GPT-2 folder (slm/finetune.py)
    engine: str = "torch"  # duet.asr.onnx_engine.ENGINES: the .nemo through NeMo, or its ONNX export
    int8: bool = False  # engine onnx: the export's int8 graph
    stream: bool = False  # cache-aware streaming ASR (greedy, no batching, no word confidences)
    asr_decoding: DecodingSettings = GreedySettings()
    asr_decoding_source: str | None = None  # the decoding.json asr_decoding was read from (and options given over it)
    batching: OfflineBatching = PIPELINE_BATCHING  # offline ASR: pieces per batch, longest piece, CPU workers
    generation: GenerationSettings = GenerationSettings()  # how the language model answers
    # the offline ASR hears the recording from this long before its first speech to this long after its last (Silero
    # VAD: speech_bounds; None: all of it): models trained on clips with little silence around them mis-hear long
    # silences (RESULTS.md, "Silence around a recording")
    trim_silence_s: float | None = None
    # a transcript whose utterance confidence (duet.asr.confidence) is below it is not understood: answered
    # NOT_UNDERSTOOD_REPLY without asking the language model (0: never)
    min_confidence: float = DEFAULT_MIN_CONFIDENCE

    def validate(self) -> "PipelineSettings":
        """Return ``self`` when every value is usable; else raise a ``ValueError`` naming the field (the command
        line checks its options first, naming the flags)."""
        if self.int8 and self.engine != "onnx":
            raise ValueError("int8 needs engine onnx (int8 is the ONNX export's graph)")
        if self.trim_silence_s is not None and self.trim_silence_s < 0:
            raise ValueError(f"trim_silence_s must be >= 0, got {self.trim_silence_s:g}")
        if self.stream and self.asr_decoding.strategy != "greedy":
            raise ValueError(f"streaming decodes greedily, not {self.asr_decoding.describe()}")
        self.asr_decoding.validate()
        self.batching.validate()
        self.generation.validate()
        check_min_confidence(self.min_confidence, "min_confidence")
        return self


# What the loaded models are: a pipeline answering with other settings (VoicePipeline.with_settings) keeps these.
LOADED_AS = ("asr_model", "slm_model", "engine", "int8", "stream", "asr_decoding")


@dataclass(frozen=True)
class Segment:
    """One piece of a transcribed recording: where it lies (seconds) and what was heard in it."""

    start: float
    end: float
    text: str
    words: list[Word] | None = None  # None when not asked for (transcribe_segments' words=False)


@dataclass
class PipelineResult:
    file: str
    transcript: str | None = None
    response: str | None = None
    error: str | None = None  # the file could not be processed; the others still run
    note: str | None = None  # e.g. why the language model was skipped
    chunks: int = 0  # pieces the ASR saw: cuts at pauses, or streamed chunks
    audio_seconds: float = 0.0
    latency_s: dict = field(default_factory=dict)  # audio_load, asr, slm, total
    # DecodingSettings.describe() of the ASR decoding, when set by load(), and the file it came from if any
    asr_decoding: str | None = None
    streaming: dict | None = None  # streaming only: partials, first partial, look-ahead, per-chunk compute
    # each word's start/end (seconds from the start of the file) and confidence: duet.asr.words.Word as dicts;
    # None when the transcription gives no word times (streaming)
    words: list[dict] | None = None
    # duet.asr.confidence.utterance_confidence of ``words`` (None: no word confidences, e.g. streaming), and whether
    # the transcript was good enough to answer (False: empty, or below the pipeline's min_confidence, in which
    # case the response is NOT_UNDERSTOOD_REPLY and the language model was not asked)
    confidence: float | None = None
    understood: bool | None = None
    # the tool calls in the language model's answer (slm.tool_calls.ToolCall as dicts: tool, input, result, error),
    # executed before the response was written; empty when it made none
    tool_calls: list[dict] = field(default_factory=list)
    # the language model's own answer when it was not shown: it held a word the model was unsure of, and the response
    # declines the request or says "I don't know that." instead (slm.tool_calls.unsure_answer)
    withheld: str | None = None

    def to_json(self) -> dict:
        return asdict(self)


def answer_fields(answer: ExecutedText | None) -> dict:
    """An answer as every result gives it (:class:`PipelineResult`, ``/v1/respond``, the WebSocket's finals): the
    response, the tool calls executed into it, and the model's own answer when an unsure one was withheld."""
    return {"response": answer.text if answer else None,
            "tool_calls": [call.as_dict() for call in answer.calls] if answer else [],
            "withheld": answer.withheld if answer else None}


def is_silent(audio: np.ndarray, sample_rate: int) -> bool:
    frame = max(1, int(0.05 * sample_rate))
    usable = len(audio) // frame * frame
    if usable == 0:
        return True
    rms = np.sqrt(np.mean(audio[:usable].reshape(-1, frame) ** 2, axis=1))
    return float(rms.max()) < SILENCE_RMS


def split_at_pauses(audio: np.ndarray, sample_rate: int, max_chunk_seconds: float,
                    speech: list[tuple[int, int]] | None = None) -> list[np.ndarray]:
    """Cut ``audio`` into chunks of at most ``max_chunk_seconds``, in the middle of pauses where possible.

    Pauses are the gaps between the VAD's speech segments (``speech``, or :func:`duet.vad.speech_segments` with
    ``RECORDING_VAD`` when not given; only computed when a cut is needed). Speech without any pause inside a stretch
    of ``max_chunk_seconds`` is cut hard at that length.
    """
    max_len = int(max_chunk_seconds * sample_rate)
    if max_len < 1:  # a zero-length chunk would never move past the start
        raise ValueError(f"max_chunk_seconds must be > 0, got {max_chunk_seconds}")
    if len(audio) <= max_len:
        return [audio]
    voiced = speech_segments(audio, sample_rate, RECORDING_VAD) if speech is None else speech
    # Candidate cut points: the middle of each pause between two speech segments.
    cuts = [int((end + start) // 2) for (_, end), (start, _) in zip(voiced[:-1], voiced[1:])]
    chunks, begin = [], 0
    while len(audio) - begin > max_len:
        inside = [c for c in cuts if begin < c <= begin + max_len]
        end = inside[-1] if inside else begin + max_len
        chunks.append(audio[begin:end])
        begin = end
    chunks.append(audio[begin:])
    return chunks


def speech_bounds(audio: np.ndarray, sample_rate: int, margin_s: float,
                  speech: list[tuple[int, int]] | None = None) -> tuple[int, int]:
    """The sample range of ``audio`` from ``margin_s`` before its first speech to ``margin_s`` after its last (Silero
    VAD's segments: ``speech``, or computed with ``RECORDING_VAD``), clipped to the recording; the whole range when
    the VAD hears no speech at all (trimming never throws a recording away: the ASR still hears it).
    ``duet.vad.energy_speech_bounds`` is the energy-threshold fallback this replaced."""
    if len(audio) == 0:
        return 0, 0
    voiced = speech_segments(audio, sample_rate, RECORDING_VAD) if speech is None else speech
    if not voiced:
        return 0, len(audio)
    margin = int(margin_s * sample_rate)
    return max(0, voiced[0][0] - margin), min(len(audio), voiced[-1][1] + margin)


class VoicePipeline:
    """Holds both loaded models and the :class:`PipelineSettings` they answer with; :meth:`run` processes one
    file and never raises for bad input.

    ``asr_decoder`` decodes as ``settings.asr_decoding`` says (recorded in each result with the decoding.json it came
    from, if any; :meth:`load` builds it); ``settings.stream`` sends the ASR through the cache-aware streaming path (see
    the module docstring). ``settings.batching.workers``: the CPU processes a long recording's batches are decoded in,
    or with an ONNX engine the threads (a server passes 1: forking a process with threads running is unsafe).
    """

    def __init__(self, asr_model, slm_model, slm_tokenizer, settings: PipelineSettings = PipelineSettings(),
                 asr_decoder: CtcDecoder | None = None):
        self.asr_model = asr_model
        self.asr_decoder = asr_decoder or build_decoder(asr_model, settings.asr_decoding)
        self.slm_model = slm_model
        self.slm_tokenizer = slm_tokenizer
        self.settings = settings.validate()
        self.sample_rate = int(asr_model.cfg.sample_rate)

    def with_settings(self, settings: PipelineSettings) -> "VoicePipeline":
        """This pipeline's models answering with ``settings`` (e.g. a request's own language-model decoding); the
        models are shared, not copied, so what they were loaded as (``LOADED_AS``) stays."""
        changed = [name for name in LOADED_AS if getattr(settings, name) != getattr(self.settings, name)]
        if changed:
            raise ValueError(f"{', '.join(changed)}: what the models were loaded as; load another pipeline instead")
        other = copy.copy(self)
        other.settings = settings.validate()
        return other

    @classmethod
    def load(cls, settings: PipelineSettings) -> tuple["VoicePipeline", float]:
        """Load both models as ``settings`` say (CPU or the first GPU); returns the pipeline and the seconds it took.

        ``engine="onnx"``: the ASR model is the export of ``asr_model`` by tools/export_onnx.py (its int8 graph with
        ``int8``), run by ONNX Runtime on CPU (``duet.asr.onnx_engine``); offline only.

        The ASR decoder is built from ``asr_decoding`` and, with ``stream``, the model checked to be a streaming model before the
        language model loads: bad settings fail fast with ``DecodingInputError`` / ``StreamingModelError``.
        """
        start = time.perf_counter()
        settings.validate()
        asr_model = (load_onnx_model(settings.asr_model, int8=settings.int8) if settings.engine == "onnx"
                     else load_asr_model(settings.asr_model))
        asr_decoder = build_decoder(asr_model, settings.asr_decoding)
        if settings.stream:
            check_streaming_model(asr_model)
        slm_tokenizer, slm_model = load_model(settings.slm_model)
        if not settings.stream:  # every offline transcript's confidence reads the word list (streaming has none)
            english_words()  # built now rather than on the first turn (about a second)
        pipeline = cls(asr_model, slm_model, slm_tokenizer, settings, asr_decoder)
        return pipeline, time.perf_counter() - start

    def describe_asr_decoding(self) -> str | None:
        """``beam8+LM(a=1.1,b=4) from experiments/demo_asr/decoding.json``, or just the decoding when it was
        given by options (or left at greedy)."""
        source = f" from {self.settings.asr_decoding_source}" if self.settings.asr_decoding_source else ""
        return self.settings.asr_decoding.describe() + source

    def transcribe(self, audio: np.ndarray) -> tuple[str, int]:
        """The transcript of ``audio`` alone (no word times: they cost 4-11 % more CPU), and its piece count."""
        segments = self.transcribe_segments(audio, words=False)
        return " ".join(s.text for s in segments if s.text), len(segments)

    def transcribe_timed(self, audio: np.ndarray) -> tuple[TimedTranscript, int]:
        """The transcript of ``audio`` with its word times from the start of ``audio`` (force-aligned under beam
        search: ``duet.asr.words``), and the number of pieces it was cut into at pauses."""
        segments = self.transcribe_segments(audio)
        text = " ".join(s.text for s in segments if s.text)
        words = None if any(s.words is None for s in segments) else [w for s in segments for w in s.words]
        return TimedTranscript(text, words), len(segments)

    def transcribe_segments(self, audio: np.ndarray, words: bool = True) -> list[Segment]:
        """The pieces :func:`split_at_pauses` cuts ``audio`` into, each with its place, transcript and, with
        ``words``, its words (times from the start of ``audio``)."""
        batching, trim_s = self.settings.batching, self.settings.trim_silence_s
        long = len(audio) > batching.max_chunk_seconds * self.sample_rate
        # one VAD pass serves both the trimming and the cuts (and none is needed for a short untrimmed clip)
        speech = speech_segments(audio, self.sample_rate, RECORDING_VAD) if trim_s is not None or long else None
        first, last = (0, len(audio)) if trim_s is None else speech_bounds(audio, self.sample_rate, trim_s, speech)
        inside = None if speech is None else [(max(a, first) - first, min(b, last) - first) for a, b in speech
                                              if b > first and a < last]
        chunks = split_at_pauses(audio[first:last], self.sample_rate, batching.max_chunk_seconds, inside)
        workers = {} if batching.workers is None else {"workers": batching.workers}
        if words:
            timed = transcribe_with_words(self.asr_model, chunks, batch_size=batching.batch_size,
                                          decoder=self.asr_decoder, **workers)
        else:
            texts = transcribe_audio(self.asr_model, chunks, batch_size=batching.batch_size, decoder=self.asr_decoder,
                                     **workers)
            timed = [TimedTranscript(text, None) for text in texts]
        segments, begin = [], first  # times stay from the start of ``audio``, silence cut or not
        for chunk, piece in zip(chunks, timed):
            end = begin + len(chunk)
            piece = piece.shifted(begin / self.sample_rate)  # the pieces are consecutive slices of ``audio``
            segments.append(Segment(round(begin / self.sample_rate, 3), round(end / self.sample_rate, 3),
                                    piece.text.strip(), piece.words))
            begin = end
        return segments

    def transcribe_streaming(self, audio: np.ndarray | Iterable[np.ndarray],
                             on_partial: Callable | None = None) -> tuple[str, dict]:
        """Stream ``audio`` (all samples, fed in 100 ms pieces, or an iterable of pieces as a live source
        delivers them) to the end; ``on_partial`` gets each ``duet.asr.streaming.Partial`` as it arrives.

        Returns the final transcript and the streaming report: partials, wall time to the first partial
        (``first_partial_s``, from the start of the ASR) and the audio it had consumed, look-ahead, chunk
        length and the median/max compute time per chunk.
        """
        pieces = audio_pieces(audio, self.sample_rate) if isinstance(audio, np.ndarray) else audio
        start = time.perf_counter()
        session = StreamingSession(self.asr_model)
        partials, first_partial_s = [], None
        for partial in session_partials(session, pieces):
            if first_partial_s is None:
                first_partial_s = time.perf_counter() - start
            partials.append(partial)
            if on_partial is not None:
                on_partial(partial)
        report = streaming_report(self.asr_model, partials)
        report = {"partials": report.pop("chunks"), "first_partial_s": round(first_partial_s, 4),
                  "first_partial_audio_s": partials[0].audio_seconds, "audio_s": round(session.audio_seconds, 3),
                  **report}
        return partials[-1].text.strip(), report

    def run_live(self, pieces: Iterable[np.ndarray], name: str = "stdin",
                 on_partial: Callable | None = None) -> PipelineResult:
        """Answer a live source: ``pieces`` are 1-D float32 samples at the model's rate, in order, as they
        arrive (``duet.asr.streaming.read_pcm16`` reads them from a pipe); needs ``stream=True``. The
        transcript streams while the source delivers; the language model answers once it has ended."""
        if not self.settings.stream:
            raise ValueError("run_live needs a streaming pipeline (stream=True)")
        result = PipelineResult(file=name, asr_decoding=self.describe_asr_decoding())
        start = time.perf_counter()
        try:
            result.transcript, result.streaming = self.transcribe_streaming(pieces, on_partial)
        except AsrInputError as e:
            result.error = f"{name}: {e}"
            return result
        result.chunks = result.streaming["partials"]
        result.audio_seconds = result.streaming["audio_s"]
        result.latency_s["asr"] = time.perf_counter() - start
        if not result.transcript:
            result.note = "empty transcript; language model skipped"
        return self._answer(result, start)

    def respond(self, transcript: str) -> str:
        return self.respond_with_calls(transcript).text

    def respond_with_calls(self, transcript: str) -> ExecutedText:
        """The language model's answer to the transcript (given as :func:`duet.text.request_text` writes it: numbers
        in digits, whoever transcribed it) with its tool calls executed (the text) and recorded (the calls)."""
        return respond_with_calls(self.slm_model, self.slm_tokenizer, request_text(transcript),
                                  settings=self.settings.generation)

    def run(self, path: str | Path, on_partial: Callable | None = None) -> PipelineResult:
        """Answer one file; ``on_partial`` receives the partial transcripts when streaming."""
        result = PipelineResult(file=str(path), asr_decoding=self.describe_asr_decoding())
        start = time.perf_counter()
        try:
            problem = audio_file_problem(path)
            if problem:
                raise AsrInputError(problem)
            audio = load_audio(path, self.sample_rate)
        except AsrInputError as e:
            result.error = str(e)
            return result
        result.latency_s["audio_load"] = time.perf_counter() - start
        return self.run_audio(audio, result, start, on_partial)

    def run_audio(self, audio: np.ndarray, result: PipelineResult, start: float | None = None,
                  on_partial: Callable | None = None) -> PipelineResult:
        """Answer ``audio`` (mono float32 at the model's rate) into ``result``; ``start`` is the
        ``time.perf_counter()`` the total latency counts from (default: now)."""
        start = time.perf_counter() if start is None else start
        result.asr_decoding = result.asr_decoding or self.describe_asr_decoding()
        result.audio_seconds = round(len(audio) / self.sample_rate, 3)
        if len(audio) == 0 or is_silent(audio, self.sample_rate):
            result.transcript, result.note = "", "no speech found (silence); language model skipped"
        else:
            t = time.perf_counter()
            if self.settings.stream:
                result.transcript, result.streaming = self.transcribe_streaming(audio, on_partial)
                result.chunks = result.streaming["partials"]
            else:
                timed, result.chunks = self.transcribe_timed(audio)
                result.transcript, result.words = timed.text, timed.words_json()
                result.confidence = utterance_confidence(timed.words)
            result.latency_s["asr"] = time.perf_counter() - t
            if not result.transcript:
                result.note = "empty transcript; language model skipped"
        return self._answer(result, start)

    def answer_transcript(self, transcript: str | None,
                          confidence: float | None) -> tuple[str | None, bool, str | None]:
        """``(response, understood, note)`` for a transcript of utterance ``confidence``: the language model's answer
        when it is understood; NOT_UNDERSTOOD_REPLY and why, without asking the language model, when it was heard
        less surely than ``min_confidence``; no answer (and no note: the caller knows why) when it is empty."""
        answer, understood, note = self.answer_with_calls(transcript, confidence)
        return (answer.text if answer else None), understood, note

    def answer_with_calls(self, transcript: str | None,
                          confidence: float | None) -> tuple[ExecutedText | None, bool, str | None]:
        """:meth:`answer_transcript` with the answer's tool calls beside its text."""
        if not transcript:
            return None, False, None
        threshold = self.settings.min_confidence
        if not is_understood(confidence, threshold):
            return ExecutedText(NOT_UNDERSTOOD_REPLY), False, (f"confidence {confidence:.2f} is below {threshold:g}: "
                                                               "not understood, language model not asked")
        return self.respond_with_calls(transcript), True, None

    def _answer(self, result: PipelineResult, start: float) -> PipelineResult:
        """:meth:`answer_transcript` of ``result.transcript`` into ``result``, and the total time since ``start``."""
        t = time.perf_counter()
        answer, result.understood, note = self.answer_with_calls(result.transcript, result.confidence)
        for name, value in answer_fields(answer).items():
            setattr(result, name, value)
        if result.understood:
            result.latency_s["slm"] = time.perf_counter() - t
        result.note = note or result.note
        result.latency_s["total"] = time.perf_counter() - start
        result.latency_s = {k: round(v, 4) for k, v in result.latency_s.items()}
        return result
