"""Voice -> transcript -> response: a NeMo CTC model feeding an instruction-tuned GPT-2.

The two models stay decoupled (the report's figure 4-1): the transcript is handed to the language
model as an Alpaca instruction. Models load once; each file then costs audio loading, ASR and
generation, timed separately. Long recordings are cut at pauses into chunks of at most
``max_chunk_s`` so memory stays bounded whatever the file's length.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from duet.asr.evaluate import AsrInputError, load_audio, transcribe_audio

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
    chunks: int = 0
    audio_seconds: float = 0.0
    latency_s: dict = field(default_factory=dict)  # audio_load, asr, slm, total

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
    import librosa

    max_len = int(max_chunk_s * sample_rate)
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
    """Holds both loaded models; :meth:`run` processes one file and never raises for bad input."""

    def __init__(self, asr_model, slm_model, slm_tokenizer, slm_decoding: dict | None = None,
                 max_chunk_s: float = 20.0, asr_batch_size: int = 8):
        self.asr_model = asr_model
        self.slm_model = slm_model
        self.slm_tokenizer = slm_tokenizer
        self.slm_decoding = slm_decoding or {}
        self.max_chunk_s = max_chunk_s
        self.asr_batch_size = asr_batch_size
        self.sample_rate = int(asr_model.cfg.sample_rate)

    @classmethod
    def load(cls, asr_path: str | Path, slm_path: str | Path, **kwargs) -> tuple["VoicePipeline", float]:
        """Load both models (CPU or the first GPU); returns the pipeline and the seconds it took."""
        from duet.asr.evaluate import load_asr_model
        from slm.generate import load_model

        start = time.perf_counter()
        asr_model = load_asr_model(asr_path)
        slm_tokenizer, slm_model = load_model(slm_path)
        return cls(asr_model, slm_model, slm_tokenizer, **kwargs), time.perf_counter() - start

    def transcribe(self, audio: np.ndarray) -> tuple[str, int]:
        chunks = split_at_pauses(audio, self.sample_rate, self.max_chunk_s)
        texts = transcribe_audio(self.asr_model, chunks, batch_size=self.asr_batch_size)
        return " ".join(t.strip() for t in texts if t.strip()), len(chunks)

    def respond(self, transcript: str) -> str:
        from slm.generate import respond

        return respond(self.slm_model, self.slm_tokenizer, transcript, **self.slm_decoding)

    def run(self, path: str | Path) -> PipelineResult:
        result = PipelineResult(file=str(path))
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
