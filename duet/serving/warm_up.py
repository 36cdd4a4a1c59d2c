"""The server's warm-up: before it serves, one bundled sample goes through what the requests call, on the inference
thread, so that what the models and libraries build on first use (the decoder's rescoring models' first passes,
word times, the language model's generation, the Silero VAD session that cuts long uploads and takes turns, the
first-use buffers of each) is built before the first client comes, and the memory the server holds when it listens
is what it holds ready to serve: a request's cost over it is its own (issue #55's target, RESULTS.md#serve-targets).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from pathlib import Path

from duet import SAMPLES_DIR
from duet.errors import DuetError
from duet.foundation.errors import first_line
from duet.pipeline import RECORDING_VAD, PipelineResult, VoicePipeline
from duet.serving.settings import ServerSettings
from duet.serving.uploads import decode_audio_file
from duet.vad import speech_segments

log = logging.getLogger(__name__)

#: A bundled LibriSpeech utterance (3.4 s, 16 kHz FLAC; in a checkout and in the installed package)
WARM_UP_CLIP = SAMPLES_DIR / "LibriSpeech" / "test-clean" / "7001" / "700101" / "7001-700101-0000.flac"


class WarmUpError(DuetError):
    """The warm-up could not transcribe and answer its sample: the server does not start."""


@dataclass(frozen=True)
class WarmUp:
    """What the warm-up did: its sample, the seconds it took, the transcript and whether an answer came."""

    clip: str
    seconds: float
    transcript: str
    answered: bool

    def line(self) -> str:
        return (f"warmed up in {self.seconds:.1f} s ({Path(self.clip).name} transcribed and answered; "
                "--no-warm-up skips it)")


def warm_up(pipeline: VoicePipeline, clip: Path = WARM_UP_CLIP) -> WarmUp:
    """Read ``clip`` as an upload is read (within the default limits, not the server's), then, on the calling
    thread (the server's inference thread), transcribe it as /v1/audio/transcriptions does, answer it as
    /v1/pipeline does (word times, confidence, the language model, whatever the confidence) and find its speech
    with the VAD that cuts long uploads. A failure is a ``WarmUpError`` in one line (its traceback goes to the log).
    """
    start = time.perf_counter()
    try:
        audio = decode_audio_file(clip, pipeline.sample_rate, ServerSettings())
        pipeline.transcribe_segments(audio, words=False)
        answering = pipeline.with_settings(dataclasses.replace(pipeline.settings, min_confidence=0.0))
        result = answering.run_audio(audio, PipelineResult(file=clip.name))
        speech_segments(audio, pipeline.sample_rate, RECORDING_VAD)
    except Exception as e:  # any failure of the models on a known-good sample: the server cannot serve
        log.error("warm-up on %s failed", clip, exc_info=True)
        raise WarmUpError(f"warm-up on {clip.name} failed ({type(e).__name__}: {first_line(e)}); "
                          "--no-warm-up starts without it") from None
    return WarmUp(str(clip), round(time.perf_counter() - start, 2), result.transcript or "",
                  bool(result.response))
