"""Voice -> transcript -> response: a NeMo CTC model feeding an instruction-tuned GPT-2.

The two models stay decoupled (the report's figure 4-1): the transcript is handed to the language
model as an Alpaca instruction. Models load once; each file then costs audio loading, ASR and
generation, timed separately. Long recordings are cut at pauses into chunks of at most
``max_chunk_s`` so memory stays bounded whatever the file's length.

With ``stream=True`` (a model trained with ``configs/fastconformer_small_streaming.yaml``) the ASR runs
through ``duet.asr.streaming.stream_transcribe`` instead: the audio goes in chunk by chunk, each chunk
yields a partial transcript (handed to ``on_partial`` as it arrives), and the result carries the
look-ahead, the first partial's time and the per-chunk compute times. A long recording streams whole,
without the cutting at pauses: the encoder's attention and convolution caches have a fixed size, so
memory does not grow with the length (the log-mel features of the file, ~0.3 MB a minute, are computed
up front).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import librosa
import numpy as np

from duet.asr.decoding import DecodingSettings, set_decoding
from duet.asr.inference import AsrInputError, load_asr_model, load_audio, transcribe_audio
from duet.asr.onnx_engine import load_onnx_model
from duet.asr.streaming import check_streaming_model, stream_transcribe, streaming_report
from slm.generate import load_model, respond
from slm.generation import GenerationSettings

# A recording whose loudest 50 ms stays below this RMS (about -50 dBFS) holds no speech worth decoding.
SILENCE_RMS = 0.003
# Pauses are regions this many dB below the recording's peak (librosa.effects.split's top_db).
PAUSE_DB = 35.0


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

    def to_json(self) -> dict:
        return asdict(self)


def is_silent(audio: np.ndarray, sample_rate: int) -> bool:
    frame = max(1, int(0.05 * sample_rate))
    usable = len(audio) // frame * frame
    if usable == 0:
        return True
    rms = np.sqrt(np.mean(audio[:usable].reshape(-1, frame) ** 2, axis=1))
    return float(rms.max()) < SILENCE_RMS


def split_at_pauses(audio: np.ndarray, sample_rate: int, max_chunk_s: float) -> list[np.ndarray]:
    """Cut ``audio`` into chunks of at most ``max_chunk_s``, in the middle of pauses where possible.

    Speech without any pause longer than ``max_chunk_s`` is cut hard at that length.
    """
    max_len = int(max_chunk_s * sample_rate)
    if max_len < 1:  # a zero-length chunk would never move past the start
        raise ValueError(f"max_chunk_s must be > 0, got {max_chunk_s}")
    if len(audio) <= max_len:
        return [audio]
    voiced = librosa.effects.split(audio, top_db=PAUSE_DB, frame_length=1024, hop_length=256)
    # Candidate cut points: the middle of each pause between two voiced regions.
    cuts = [int((end + start) // 2) for (_, end), (start, _) in zip(voiced[:-1], voiced[1:])]
    chunks, begin = [], 0
    while len(audio) - begin > max_len:
        inside = [c for c in cuts if begin < c <= begin + max_len]
        end = inside[-1] if inside else begin + max_len
        chunks.append(audio[begin:end])
        begin = end
    chunks.append(audio[begin:])
    return chunks


class VoicePipeline:
    """Holds both loaded models; :meth:`run` processes one file and never raises for bad input.

    ``asr_decoding`` is the decoding :meth:`load` set on ``asr_model`` and ``asr_decoding_source`` the
    decoding.json it was read from, if any (both recorded in each result); ``generation`` is how the language
    model decodes; ``stream`` sends the ASR through the cache-aware streaming path (see the module docstring).
    """

    def __init__(self, asr_model, slm_model, slm_tokenizer, generation: GenerationSettings = GenerationSettings(),
                 max_chunk_s: float = 20.0, asr_batch_size: int = 8,
                 asr_decoding: DecodingSettings | None = None, stream: bool = False,
                 asr_decoding_source: str | None = None):
        self.asr_model = asr_model
        self.slm_model = slm_model
        self.slm_tokenizer = slm_tokenizer
        self.generation = generation.validate()
        self.max_chunk_s = max_chunk_s
        self.asr_batch_size = asr_batch_size
        self.asr_decoding = asr_decoding
        self.asr_decoding_source = asr_decoding_source
        self.stream = stream
        self.sample_rate = int(asr_model.cfg.sample_rate)

    @classmethod
    def load(cls, asr_path: str | Path, slm_path: str | Path, asr_decoding: DecodingSettings | None = None,
             stream: bool = False, engine: str = "torch", int8: bool = False, **kwargs) -> tuple["VoicePipeline", float]:
        """Load both models (CPU or the first GPU); returns the pipeline and the seconds it took.

        ``engine="onnx"``: the ASR model is the export of ``asr_path`` by tools/export_onnx.py (its int8 graph with
        ``int8``), run by ONNX Runtime on CPU (``duet.asr.onnx_engine``); offline only.

        The ASR model is set to ``asr_decoding`` (default greedy) and, with ``stream``, checked to be a
        streaming model before the language model loads: bad settings fail fast with
        ``DecodingInputError`` / ``StreamingModelError``.
        """
        start = time.perf_counter()
        asr_model = load_onnx_model(asr_path, int8=int8) if engine == "onnx" else load_asr_model(asr_path)
        asr_decoding = set_decoding(asr_model, asr_decoding or DecodingSettings())
        if stream:
            check_streaming_model(asr_model)
        slm_tokenizer, slm_model = load_model(slm_path)
        pipeline = cls(asr_model, slm_model, slm_tokenizer, asr_decoding=asr_decoding, stream=stream, **kwargs)
        return pipeline, time.perf_counter() - start

    def describe_asr_decoding(self) -> str | None:
        """``beam16+LM(a=0.8,b=4) from experiments/demo_asr/decoding.json``, or just the decoding when it was
        given by options (or left at greedy)."""
        if self.asr_decoding is None:
            return None
        source = f" from {self.asr_decoding_source}" if self.asr_decoding_source else ""
        return self.asr_decoding.describe() + source

    def transcribe(self, audio: np.ndarray) -> tuple[str, int]:
        chunks = split_at_pauses(audio, self.sample_rate, self.max_chunk_s)
        texts = transcribe_audio(self.asr_model, chunks, batch_size=self.asr_batch_size)
        return " ".join(t.strip() for t in texts if t.strip()), len(chunks)

    def transcribe_streaming(self, audio: np.ndarray, on_partial: Callable | None = None) -> tuple[str, dict]:
        """Stream ``audio`` whole; ``on_partial`` gets each ``duet.asr.streaming.Partial`` as it arrives.

        Returns the final transcript and the streaming report: partials, wall time to the first partial
        (``first_partial_s``, from the start of the ASR) and the audio it had consumed, look-ahead, chunk
        length and the median/max compute time per chunk.
        """
        start = time.perf_counter()
        partials, first_partial_s = [], None
        for partial in stream_transcribe(self.asr_model, audio):
            if first_partial_s is None:
                first_partial_s = time.perf_counter() - start
            partials.append(partial)
            if on_partial is not None:
                on_partial(partial)
        report = streaming_report(self.asr_model, partials)
        report = {"partials": report.pop("chunks"), "first_partial_s": round(first_partial_s, 4),
                  "first_partial_audio_s": partials[0].audio_seconds, **report}
        return partials[-1].text.strip(), report

    def respond(self, transcript: str) -> str:
        return respond(self.slm_model, self.slm_tokenizer, transcript, settings=self.generation)

    def run(self, path: str | Path, on_partial: Callable | None = None) -> PipelineResult:
        """Answer one file; ``on_partial`` receives the partial transcripts when streaming."""
        result = PipelineResult(file=str(path), asr_decoding=self.describe_asr_decoding())
        start = time.perf_counter()
        try:
            path = Path(path)
            if not path.is_file():
                raise AsrInputError(f"no such file: {path}")
            if path.stat().st_size == 0:
                raise AsrInputError(f"empty file: {path}")
            audio = load_audio(path, self.sample_rate)
        except AsrInputError as e:
            result.error = str(e)
            return result
        result.audio_seconds = round(len(audio) / self.sample_rate, 3)
        result.latency_s["audio_load"] = time.perf_counter() - start

        if len(audio) == 0 or is_silent(audio, self.sample_rate):
            result.transcript, result.note = "", "no speech found (silence); language model skipped"
        else:
            t = time.perf_counter()
            if self.stream:
                result.transcript, result.streaming = self.transcribe_streaming(audio, on_partial)
                result.chunks = result.streaming["partials"]
            else:
                result.transcript, result.chunks = self.transcribe(audio)
            result.latency_s["asr"] = time.perf_counter() - t
            if not result.transcript:
                result.note = "empty transcript; language model skipped"
        if result.transcript:
            t = time.perf_counter()
            result.response = self.respond(result.transcript)
            result.latency_s["slm"] = time.perf_counter() - t
        result.latency_s["total"] = time.perf_counter() - start
        result.latency_s = {k: round(v, 4) for k, v in result.latency_s.items()}
        return result
