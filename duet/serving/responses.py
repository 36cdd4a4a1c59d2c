"""The shapes of the server's answers: a transcription in each of OpenAI's five ``response_format``s (``json``,
``text``, ``verbose_json``, ``srt``, ``vtt``) and spoken answers as base64 WAV."""

from __future__ import annotations

import asyncio
import base64
import dataclasses

from fastapi.responses import PlainTextResponse

from duet.speech_out import speak_wav_bytes

RESPONSE_FORMATS = ("json", "text", "verbose_json", "srt", "vtt")  # OpenAI's five
TIMED_FORMATS = ("verbose_json", "srt", "vtt")  # the formats that carry word or cue times
CUE_WORDS = 12  # words in one subtitle cue at most: about two lines on a screen


def transcription_response(segments: list, response_format: str, duration: float):
    """OpenAI's answer in ``response_format``: ``json`` ``{"text"}``, ``text``, ``verbose_json`` (segments cut at
    pauses, words with their times and confidence), ``srt`` or ``vtt`` (cues of at most ``CUE_WORDS`` words, timed
    by their first and last word)."""
    text = " ".join(s.text for s in segments if s.text)
    if response_format == "text":
        return PlainTextResponse(text)
    if response_format == "json":
        return {"text": text}
    if response_format == "verbose_json":
        return {"task": "transcribe", "language": "en", "duration": round(duration, 3), "text": text,
                "segments": [{"id": i, "start": s.start, "end": s.end, "text": s.text} for i, s in enumerate(segments)],
                # OpenAI's word objects (word, start, end), plus duet.asr.words' confidence
                "words": [dataclasses.asdict(w) for s in segments for w in (s.words or [])]}
    cues = subtitle_cues(segments)
    if response_format == "srt":
        return PlainTextResponse("".join(f"{n}\n{cue_time(start, ',')} --> {cue_time(end, ',')}\n{line}\n\n"
                                         for n, (start, end, line) in enumerate(cues, 1)))
    return PlainTextResponse("WEBVTT\n\n" + "".join(f"{cue_time(start, '.')} --> {cue_time(end, '.')}\n{line}\n\n"
                                                    for start, end, line in cues), media_type="text/vtt")


def subtitle_cues(segments: list) -> list[tuple[float, float, str]]:
    """(start, end, text) of each cue: a segment's words in runs of ``CUE_WORDS``, or the segment itself when it has
    no word times."""
    cues = []
    for segment in segments:
        if not segment.text:
            continue
        words = segment.words or []
        if not words:
            cues.append((segment.start, segment.end, segment.text))
            continue
        for first in range(0, len(words), CUE_WORDS):
            run = words[first:first + CUE_WORDS]
            cues.append((run[0].start, max(run[-1].end, run[0].start), " ".join(w.word for w in run)))
    return cues


def cue_time(seconds: float, separator: str) -> str:
    """``hh:mm:ss,mmm`` (SubRip) or ``hh:mm:ss.mmm`` (WebVTT)."""
    millis = round(max(seconds, 0.0) * 1000)
    return f"{millis // 3600000:02d}:{millis // 60000 % 60:02d}:{millis // 1000 % 60:02d}{separator}{millis % 1000:03d}"


def speech_json(wav: bytes) -> dict:
    return {"format": "wav", "base64": base64.b64encode(wav).decode("ascii")}


async def spoken(response: str) -> dict:
    """An answer's ``speech`` (WAV, or None when it could not be spoken) and the ``error`` saying why not, spoken
    beside the event loop."""
    wav, error = await asyncio.to_thread(speak_wav_bytes, response)
    return {"speech": speech_json(wav) if wav else None, "error": error}
