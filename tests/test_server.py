"""duet.serving / tools/serve.py: every endpoint, every bad request, the queue, concurrent requests, the WebSocket.

The app is built around real small models (the micro FastConformer-CTC of conftest and a 1-layer GPT-2), in
memory, and driven with FastAPI's TestClient: no port, no network.
"""

from __future__ import annotations

import base64
import copy
import io
import json
import shutil
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import soundfile
from fastapi.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

from duet.asr.batching import PIPELINE_BATCHING
from duet.asr.inference import load_audio
from duet.asr.streaming import transcribe_streaming
from duet.asr.confidence import NOT_UNDERSTOOD_REPLY, utterance_confidence
from duet.foundation import python_command
from duet.errors import DuetError
from duet.pipeline import PipelineSettings, VoicePipeline
from duet.serving.app import create_app
from duet.serving.settings import ServerSettings, ServerSettingsError
from duet.serving.streams import RedecodeStream
from duet.serving.warm_up import WARM_UP_CLIP, WarmUpError
from duet.synth.conversation import compose, room_noise
from duet.vad import SileroVad
from duet.serving.turns import TurnTaker
from slm.generation import ContextLengthError, GenerationSettings, load_model
from slm.tool_calls import ExecutedText, execute_calls

SR = 16000
# TestClient's Host; no warm-up (its own tests have it): the tests build many apps, some around a pipeline made to fail
SETTINGS = ServerSettings(queue_size=16, allowed_hosts=("testserver",), warm_up=False)
WARM = replace(SETTINGS, warm_up=True)


@pytest.fixture(scope="module")
def pipeline(micro_model_and_manifest, tiny_slm_folder) -> VoicePipeline:
    model, _, _, _ = micro_model_and_manifest
    tokenizer, slm = load_model(tiny_slm_folder)
    # the random-weight micro model is unsure of every word: the low-confidence check is off here, and the tests
    # of the check set thresholds around the confidence it actually has
    return VoicePipeline(model, slm, tokenizer, PipelineSettings(
        generation=GenerationSettings(max_new_tokens=8), batching=replace(PIPELINE_BATCHING, workers=1),
        min_confidence=0.0))


@pytest.fixture(scope="module")
def clips(micro_model_and_manifest) -> list[Path]:
    return [Path(e["audio_filepath"]) for e in micro_model_and_manifest[3][:4]]


@pytest.fixture(scope="module")
def client(pipeline):
    with TestClient(create_app(pipeline, SETTINGS, asr_model="micro.nemo", slm_model="tiny_slm")) as client:
        yield client


def expected_transcript(pipeline, path: Path) -> str:
    return pipeline.transcribe(load_audio(path, SR))[0]


def upload(path: Path, name: str | None = None) -> dict:
    return {"file": (name or path.name, path.read_bytes(), "application/octet-stream")}


# ---------------------------------------------------------------- endpoints


def test_health_names_the_models_and_the_stream_decoder(client):
    health = client.get("/health").json()
    assert health["status"] == "ok" and (health["asr_model"], health["slm_model"]) == ("micro.nemo", "tiny_slm")
    assert "re-decode" in health["stream_decoder"]
    assert (health["queue"]["active"], health["queue"]["capacity"]) == (0, 16)


def pipeline_calls_by_thread(monkeypatch) -> list[tuple[str, str]]:
    """``(method, thread name)`` of each call of the pipeline's transcription and answer methods from now on."""
    calls = []
    for name in ("transcribe_segments", "run_audio", "respond_with_calls"):
        def recorded(self, *args, _real=getattr(VoicePipeline, name), _name=name, **kwargs):
            calls.append((_name, threading.current_thread().name))
            return _real(self, *args, **kwargs)
        monkeypatch.setattr(VoicePipeline, name, recorded)
    return calls


def test_the_server_warms_up_on_its_inference_thread_before_it_serves(pipeline, monkeypatch):
    """The bundled sample is transcribed, answered and searched for speech (the VAD session built) on the inference
    thread while the app is built, so before any request; /health reports it, outside the queue's figures.
    --no-warm-up runs none of it."""
    calls = pipeline_calls_by_thread(monkeypatch)
    monkeypatch.setattr(SileroVad, "_shared", None)
    cold = create_app(pipeline, SETTINGS)
    cold.state.service.worker.close()
    assert calls == [] and SileroVad._shared is None and cold.state.service.warm_up is None
    app = create_app(pipeline, replace(WARM, max_audio_seconds=1.0))  # the clients' limits are not the sample's
    assert {name for name, _ in calls} == {"transcribe_segments", "run_audio", "respond_with_calls"}
    assert all(thread.startswith("duet-inference") for _, thread in calls), calls
    assert SileroVad._shared is not None
    with TestClient(app) as warm:
        health = warm.get("/health").json()
    want = expected_transcript(pipeline, WARM_UP_CLIP)
    assert health["warm_up"]["transcript"] == want and health["warm_up"]["answered"] is True
    assert health["warm_up"]["clip"] == str(WARM_UP_CLIP) and health["warm_up"]["seconds"] > 0
    assert health["queue"]["calls"] == 0


def test_a_failed_warm_up_is_one_line_naming_the_sample_and_the_way_round(pipeline, monkeypatch, caplog):
    def broken(self, *args, **kwargs):
        raise RuntimeError("out of memory\n  in a frame of the model\n  and another")
    monkeypatch.setattr(VoicePipeline, "run_audio", broken)
    with pytest.raises(WarmUpError) as failed:
        create_app(pipeline, WARM)
    assert isinstance(failed.value, DuetError)  # tools/serve.py's cli prints it as its one error line
    assert str(failed.value) == (f"warm-up on {WARM_UP_CLIP.name} failed (RuntimeError: out of memory); "
                                 "--no-warm-up starts without it")
    assert "Traceback" in caplog.text and "in a frame of the model" in caplog.text  # the details go to the log
    with TestClient(create_app(pipeline, SETTINGS)) as cold:
        assert cold.get("/health").json()["warm_up"] is None


def test_the_page_and_its_files_are_served_without_any_external_address(client):
    page = client.get("/")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    for asset in ("/static/app.js", "/static/style.css"):
        assert asset in page.text
    texts = [page.text] + [client.get(asset).text for asset in ("/static/app.js", "/static/style.css")]
    assert "getUserMedia" in texts[1] and "/v1/stream" in texts[1]
    for text in texts:  # works offline: no CDN, no web font
        assert "http://" not in text and "https://" not in text and "@import" not in text


def test_transcriptions_in_each_response_format(client, pipeline, clips):
    want = expected_transcript(pipeline, clips[0])
    assert want, "the micro model should emit some tokens, or the test cannot tell transcripts apart"
    assert client.post("/v1/audio/transcriptions", files=upload(clips[0])).json() == {"text": want}
    assert client.post("/v1/audio/transcriptions", files=upload(clips[0]),
                       data={"model": "whisper-1"}).json() == {"text": want}  # OpenAI clients send one: ignored
    text = client.post("/v1/audio/transcriptions", files=upload(clips[0]), data={"response_format": "text"})
    assert text.status_code == 200 and text.headers["content-type"].startswith("text/plain") and text.text == want
    verbose = client.post("/v1/audio/transcriptions", files=upload(clips[0]),
                          data={"response_format": "verbose_json"}).json()
    duration = soundfile.info(clips[0]).duration
    assert verbose["text"] == want and verbose["duration"] == pytest.approx(duration, abs=0.001)
    assert [(s["start"], s["text"]) for s in verbose["segments"]] == [(0.0, want)]
    assert verbose["segments"][-1]["end"] == pytest.approx(duration, abs=0.001)
    words = verbose["words"]
    assert " ".join(w["word"] for w in words) == want
    assert all(0 <= w["start"] <= w["end"] <= duration + 0.001 and 0 <= w["confidence"] <= 1 for w in words)


def test_the_openai_client_reads_all_five_response_formats_over_a_real_socket(pipeline, clips):
    """The ``openai`` Python client, as a user points it at the server (base_url), for each response format it asks
    for: its own types parse the JSON ones, the text ones come back as strings."""
    from openai import OpenAI

    from tests.test_server_browser import serve_in_thread

    want = expected_transcript(pipeline, clips[0])
    duration = soundfile.info(clips[0]).duration
    server, url = serve_in_thread(create_app(pipeline, SETTINGS))
    try:
        client = OpenAI(base_url=f"{url}/v1", api_key="not-checked", max_retries=0, timeout=60)

        def transcribe(**options):
            with open(clips[0], "rb") as audio:
                return client.audio.transcriptions.create(model="whisper-1", file=audio, **options)

        plain, text = transcribe(), transcribe(response_format="text")
        verbose = transcribe(response_format="verbose_json", timestamp_granularities=["word", "segment"])
        srt, vtt = transcribe(response_format="srt"), transcribe(response_format="vtt")
    finally:
        server.should_exit = True
    assert plain.text == want and text.strip() == want
    assert verbose.text == want and verbose.duration == pytest.approx(duration, abs=0.001)
    assert [s.text for s in verbose.segments] == [want] and verbose.segments[0].start == 0.0
    assert " ".join(w.word for w in verbose.words) == want
    assert all(0 <= w.start <= w.end <= duration + 0.001 for w in verbose.words)
    assert srt.startswith("1\n00:00:00,000 --> ") and vtt.startswith("WEBVTT")
    assert " ".join(want.split()[:2]) in srt and " ".join(want.split()[:2]) in vtt


def test_verbose_json_segments_are_the_pieces_cut_at_pauses(client, pipeline, clips, tmp_path):
    """Two clips 1 s apart, with the pipeline's chunk limit below their sum: two segments, placed in time."""
    first, second = (load_audio(path, SR) for path in clips[:2])
    path = tmp_path / "two.wav"
    soundfile.write(path, np.concatenate([first, np.zeros(SR, dtype=np.float32), second]), SR)
    limit = (max(len(first), len(second)) + SR) / SR
    with TestClient(create_app(replace_chunk_limit(pipeline, limit), SETTINGS)) as short_chunks:
        verbose = short_chunks.post("/v1/audio/transcriptions", files=upload(path),
                                    data={"response_format": "verbose_json"}).json()
    segments = verbose["segments"]
    assert len(segments) == 2 and segments[0]["start"] == 0.0 and segments[1]["end"] == verbose["duration"]
    assert segments[0]["end"] == segments[1]["start"]
    assert len(first) / SR < segments[0]["end"] < (len(first) + SR) / SR  # the cut fell in the pause
    assert verbose["text"] == " ".join(s["text"] for s in segments if s["text"])
    # each word lies in its segment: the second piece's words were moved by where that piece starts
    second_words = [w for w in verbose["words"] if w["start"] >= segments[1]["start"]]
    assert len(verbose["words"]) - len(second_words) == len(segments[0]["text"].split())
    assert " ".join(w["word"] for w in second_words) == segments[1]["text"]


def replace_chunk_limit(pipeline: VoicePipeline, max_chunk_seconds: float) -> VoicePipeline:
    settings = pipeline.settings
    return pipeline.with_settings(replace(settings, batching=replace(settings.batching,
                                                                     max_chunk_seconds=max_chunk_seconds)))


def test_any_rate_channel_count_and_container_is_read(client, pipeline, clips, tmp_path):
    import librosa

    audio = load_audio(clips[0], SR)
    stereo = tmp_path / "stereo44k.wav"
    loud = librosa.resample(audio, orig_sr=SR, target_sr=44100)
    soundfile.write(stereo, np.stack([loud, loud], axis=1), 44100)
    heard = client.post("/v1/audio/transcriptions", files=upload(stereo)).json()
    assert heard == {"text": pipeline.transcribe(load_audio(stereo, SR))[0]}
    if shutil.which("ffmpeg") is None:
        pytest.skip("ffmpeg not installed: MP3/WebM uploads not checked")
    for suffix, codec in ((".mp3", []), (".webm", ["-c:a", "libopus"])):
        out = tmp_path / f"clip{suffix}"
        subprocess.run(["ffmpeg", "-v", "error", "-y", "-i", str(clips[0]), *codec, str(out)], check=True)
        if suffix == ".webm":
            with pytest.raises(soundfile.LibsndfileError):
                soundfile.info(str(out))  # libsndfile cannot: this one takes the ffmpeg path
        reply = client.post("/v1/audio/transcriptions", files=upload(out), data={"response_format": "verbose_json"})
        assert reply.status_code == 200, reply.text
        assert abs(reply.json()["duration"] - soundfile.info(clips[0]).duration) < 0.1


def test_pipeline_answers_with_per_stage_latency(client, pipeline, clips):
    body = client.post("/v1/pipeline", files=upload(clips[0])).json()
    transcript = expected_transcript(pipeline, clips[0])
    assert body["transcript"] == transcript and body["response"] == pipeline.respond(transcript)
    assert body["error"] is None and body["file"] == clips[0].name
    assert {"audio_load", "queue_wait", "asr", "slm", "total"} <= set(body["latency_s"])
    assert body["latency_s"]["total"] >= body["latency_s"]["asr"] > 0


def heard_confidence(pipeline: VoicePipeline, audio: np.ndarray) -> float:
    """The utterance confidence the pipeline's own offline decoding gives ``audio``."""
    return utterance_confidence(pipeline.transcribe_timed(audio)[0].words)


def with_min_confidence(pipeline: VoicePipeline, min_confidence: float) -> VoicePipeline:
    return pipeline.with_settings(replace(pipeline.settings, min_confidence=min_confidence))


def test_pipeline_below_the_threshold_is_not_understood_and_the_language_model_is_not_asked(pipeline, clips,
                                                                                              monkeypatch):
    confidence = heard_confidence(pipeline, load_audio(clips[0], SR))
    assert 0.02 < confidence < 0.98, "thresholds on both sides of the clip's confidence must exist"
    asked = []
    monkeypatch.setattr(VoicePipeline, "respond_with_calls",
                        lambda self, text: asked.append(text) or ExecutedText("the model's answer"))
    for threshold, understood in ((round(confidence + 0.01, 4), False), (round(confidence - 0.01, 4), True)):
        with TestClient(create_app(with_min_confidence(pipeline, threshold), SETTINGS)) as client:
            assert client.get("/health").json()["min_confidence"] == threshold
            body = client.post("/v1/pipeline", files=upload(clips[0])).json()
        assert body["confidence"] == confidence and body["understood"] is understood, (threshold, body)
        if understood:
            assert body["response"] == "the model's answer" and "slm" in body["latency_s"]
        else:
            assert body["response"] == NOT_UNDERSTOOD_REPLY and "slm" not in body["latency_s"]
            assert f"below {threshold:g}" in body["note"] and asked == []  # the language model was not asked
    assert asked == [body["transcript"]]


def test_stream_below_the_threshold_is_not_understood_and_the_language_model_is_not_asked(pipeline, clips,
                                                                                            monkeypatch):
    chunks = pcm16_chunks(load_audio(clips[0], SR))
    heard = (np.frombuffer(b"".join(chunks), dtype="<i2") / 32768.0).astype(np.float32)
    confidence = heard_confidence(pipeline, heard)
    asked = []
    monkeypatch.setattr(VoicePipeline, "respond_with_calls",
                        lambda self, text: asked.append(text) or ExecutedText("the model's answer"))
    finals = {}
    for threshold in (round(confidence + 0.01, 4), round(confidence - 0.01, 4)):
        app = create_app(with_min_confidence(pipeline, threshold), replace(SETTINGS, stream_interval=0.5))
        with TestClient(app) as client, client.websocket_connect("/v1/stream") as ws:
            for chunk in chunks:
                ws.send_bytes(chunk)
            ws.send_text(json.dumps({"type": "end"}))
            while (message := ws.receive_json())["type"] != "final":  # partials, speech_start/speech_end
                pass
        finals[threshold] = message
    unsure, sure = finals.values()
    assert unsure["confidence"] == sure["confidence"] == confidence
    assert unsure["understood"] is False and unsure["response"] == NOT_UNDERSTOOD_REPLY
    assert "below" in unsure["note"] and "slm" not in unsure["latency_s"]
    assert sure["understood"] is True and sure["response"] == "the model's answer"
    assert asked == [sure["transcript"]]  # asked once: for the understood stream only


def test_pipeline_speaks_the_answer_as_a_wav(client, clips):
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng not installed (bash tools/setup.sh installs it)")
    body = client.post("/v1/pipeline", files=upload(clips[0]), data={"speak": "true"}).json()
    assert body["speech"]["format"] == "wav" and body["response"]
    audio, rate = soundfile.read(io.BytesIO(base64.b64decode(body["speech"]["base64"])))
    assert len(audio) / rate > 0.3


def test_respond_answers_a_text_with_the_requests_own_options(client, pipeline):
    body = client.post("/v1/respond", json={"text": "set a timer"}).json()
    assert body["response"] == pipeline.respond("set a timer")
    short = client.post("/v1/respond", json={"text": "set a timer", "max_new_tokens": 1}).json()["response"]
    assert short != body["response"] and len(short) < len(body["response"])
    assert pipeline.settings.generation.max_new_tokens == 8  # the request changed nothing shared


def test_respond_and_pipeline_return_the_executed_tool_calls_beside_the_text(client, clips, monkeypatch):
    """What the language model wrote as a call (slm.tool_calls) comes back executed in the text, and the call itself
    (tool, input, result) beside it, in /v1/respond's JSON and /v1/pipeline's."""
    assert client.post("/v1/respond", json={"text": "set a timer"}).json()["tool_calls"] == []
    worked_out = execute_calls("50 minus 3 is <<calc: 50 - 3>>.")
    monkeypatch.setattr(VoicePipeline, "respond_with_calls", lambda self, text: worked_out)
    body = client.post("/v1/respond", json={"text": "what is fifty minus three"}).json()
    call = {"tool": "calc", "input": "50 - 3", "result": "47", "error": None}
    assert body["response"] == "50 minus 3 is 47." and body["tool_calls"] == [call]
    body = client.post("/v1/pipeline", files=upload(clips[0])).json()
    assert body["tool_calls"] == ([call] if body["understood"] else [])
    assert body["response"] == ("50 minus 3 is 47." if body["understood"] else NOT_UNDERSTOOD_REPLY)


def test_respond_and_pipeline_return_an_unsure_answer_as_withheld_beside_its_decline(client, clips):
    """An answer holding a token below the request's floor (1: any token short of certain) is withheld: the response
    declines the request by name, and the model's own answer comes back beside it; at 0 nothing is withheld."""
    shown = client.post("/v1/respond", json={"text": "set a timer", "min_token_prob": 0}).json()
    assert shown["withheld"] is None
    body = client.post("/v1/respond", json={"text": "set a timer", "min_token_prob": 1}).json()
    assert body["response"] == "Sorry, I can't set a timer." and body["withheld"] == shown["response"]
    body = client.post("/v1/pipeline", files=upload(clips[0]), data={"min_token_prob": "1"}).json()
    assert body["understood"] and body["withheld"] and body["response"].startswith("Sorry, I can't ")


# ---------------------------------------------------------------- bad requests


@pytest.fixture(scope="module")
def strict_client(pipeline):
    """Limits small enough to reach with the sample: 3 s of audio, 200 KiB uploads."""
    settings = replace(SETTINGS, max_audio_seconds=3.0, max_upload_mb=0.2)
    with TestClient(create_app(pipeline, settings)) as client:
        yield client


def bad_requests(clips: list[Path], tmp_path: Path) -> list[tuple[str, dict, int, str]]:
    long_clip = tmp_path / "long.flac"
    soundfile.write(long_clip, np.concatenate([load_audio(p, SR) for p in clips[:2]]), SR)
    big = tmp_path / "big.wav"
    soundfile.write(big, np.zeros(int(2.9 * 44100 * 2), dtype=np.float32).reshape(-1, 2), 44100, subtype="FLOAT")
    corrupt = tmp_path / "corrupt.wav"
    corrupt.write_bytes(b"RIFF" + b"not a wave at all" * 50)
    nodata = tmp_path / "nodata.wav"
    soundfile.write(nodata, np.zeros(0, dtype=np.float32), SR)
    return [
        ("/v1/audio/transcriptions", {"files": {"file": ("e.wav", b"", "audio/wav")}}, 400,
         "file: the upload is empty"),
        ("/v1/audio/transcriptions", {"files": upload(corrupt)}, 400, "file: cannot decode the audio"),
        ("/v1/audio/transcriptions", {"files": upload(nodata)}, 400, "file: the audio is empty"),
        ("/v1/audio/transcriptions", {"files": upload(long_clip)}, 413,
         "file: the audio is longer than the limit of 3 s"),
        ("/v1/audio/transcriptions", {"files": upload(big)}, 413, "larger than the upload limit of 0.2 MiB"),
        ("/v1/audio/transcriptions", {"json": {"file": "a.wav"}}, 400, "file: Field required"),
        ("/v1/audio/transcriptions", {"files": upload(clips[0]), "data": {"response_format": "xml"}}, 400,
         "response_format: must be one of json, text, verbose_json, srt, vtt"),
        ("/v1/pipeline", {"files": upload(clips[0]), "data": {"top_p": "2"}}, 400, "top_p must be in (0, 1]"),
        ("/v1/pipeline", {"files": upload(clips[0]), "data": {"strategy": "viterbi"}}, 400,
         "strategy must be one of greedy, beam, sample"),
        ("/v1/pipeline", {"files": upload(clips[0]), "data": {"max_new_tokens": "many"}}, 400, "max_new_tokens:"),
        ("/v1/pipeline", {"files": upload(corrupt)}, 400, "file: cannot decode the audio"),
        ("/v1/respond", {"json": {"text": "  "}}, 400, "text: empty"),
        ("/v1/respond", {"json": {"txt": "hello"}}, 400, "txt: Extra inputs are not permitted"),
        ("/v1/respond", {"content": b"not json", "headers": {"content-type": "application/json"}}, 400, "JSON"),
        ("/v1/respond", {"json": {"text": "hi", "num_beams": 1, "strategy": "beam"}}, 400, "num_beams >= 2"),
        ("/v1/nothing-here", {"json": {}}, 404, "Not Found"),
    ]


def test_each_bad_request_is_a_4xx_json_error_naming_the_problem_and_the_server_keeps_serving(
        strict_client, clips, tmp_path):
    for path, request, status, message in bad_requests(clips, tmp_path):
        reply = strict_client.post(path, **request)
        assert reply.status_code == status and message in reply.json()["error"], (path, message, reply.text)
        assert strict_client.get("/health").json()["queue"]["active"] == 0  # no slot left taken
    assert strict_client.post("/v1/audio/transcriptions", files=upload(clips[0])).status_code == 200


def test_a_full_queue_is_answered_503_and_the_server_recovers(pipeline, clips, monkeypatch):
    app = create_app(pipeline, replace(SETTINGS, queue_size=1))
    release, entered = threading.Event(), threading.Event()
    real = VoicePipeline.transcribe_segments

    def held(self, audio, words=True):
        entered.set()
        release.wait(30)
        return real(self, audio, words=words)
    monkeypatch.setattr(VoicePipeline, "transcribe_segments", held)
    with TestClient(app) as client, ThreadPoolExecutor(1) as pool:
        first = pool.submit(client.post, "/v1/audio/transcriptions", files=upload(clips[0]))
        assert entered.wait(30)
        busy = client.post("/v1/audio/transcriptions", files=upload(clips[1]))
        assert busy.status_code == 503 and "server busy" in busy.json()["error"]
        release.set()
        assert first.result(60).status_code == 200
        assert client.post("/v1/audio/transcriptions", files=upload(clips[1])).status_code == 200


def test_concurrent_requests_get_their_own_results(client, pipeline, clips):
    """Different clips and different language-model options at once: each answer is the one it gets alone."""
    jobs = [(clip, tokens) for clip in clips for tokens in (1, 8)]
    alone = {}
    for clip, tokens in jobs:
        settings = replace(pipeline.settings.generation, max_new_tokens=tokens)
        other = replace_generation(pipeline, settings)
        transcript = expected_transcript(pipeline, clip)
        alone[(clip, tokens)] = (transcript, other.respond(transcript))

    def ask(job):
        clip, tokens = job
        body = client.post("/v1/pipeline", files=upload(clip), data={"max_new_tokens": str(tokens)}).json()
        return body["transcript"], body["response"]
    with ThreadPoolExecutor(len(jobs)) as pool:
        together = list(pool.map(ask, jobs * 2))
    assert together == [alone[job] for job in jobs * 2]
    assert len({r for _, r in alone.values()}) > 1, "the answers should differ, or mix-ups could not show"


def replace_generation(pipeline: VoicePipeline, settings: GenerationSettings) -> VoicePipeline:
    return pipeline.with_settings(replace(pipeline.settings, generation=settings))


# ---------------------------------------------------------------- WebSocket


def pcm16_chunks(audio: np.ndarray, seconds: float = 0.25) -> list[bytes]:
    pcm = (np.clip(audio, -1, 1) * 32767).astype("<i2")
    step = int(seconds * SR)
    return [pcm[i:i + step].tobytes() for i in range(0, len(pcm), step)]


def receive_until(ws, kinds: tuple[str, ...] = ("final", "error")) -> tuple[dict, list[dict]]:
    """Messages up to the first of ``kinds``: (that one, those before it)."""
    before = []
    while (message := ws.receive_json())["type"] not in kinds:
        before.append(message)
    return message, before


def test_stream_sends_partials_as_audio_arrives_then_the_final_transcript_and_answer(pipeline, clips):
    audio = np.concatenate([load_audio(path, SR) for path in clips[:2]])
    chunks = pcm16_chunks(audio)
    with TestClient(create_app(pipeline, replace(SETTINGS, stream_interval=0.5))) as client:
        with client.websocket_connect("/v1/stream") as ws:
            for chunk in chunks:
                ws.send_bytes(chunk)
            ws.send_text(json.dumps({"type": "end"}))
            message, before = receive_until(ws)
    partials = [m for m in before if m["type"] == "partial"]
    assert message["type"] == "final", message
    # the VAD's messages: each utterance's speech starts and ends (both are speech to it), numbered
    vad = [(m["type"], m["turn"]) for m in before if m["type"].startswith("speech_")]
    assert vad and vad[0] == ("speech_start", 1) and vad[-1][0] == "speech_end" and len(vad) % 2 == 0
    heard = (np.frombuffer(b"".join(chunks), dtype="<i2") / 32768.0).astype(np.float32)
    transcript = pipeline.transcribe(heard)[0]
    assert message["transcript"] == transcript and message["response"] == pipeline.respond(transcript)
    assert len(partials) >= 2 and [p["audio_s"] for p in partials] == sorted(p["audio_s"] for p in partials)
    stream = message["stream"]
    assert stream["decoder"] == "re-decode" and stream["decodes"] == len(partials) + 1
    assert stream["audio_s"] == pytest.approx(len(audio) / SR, abs=0.001) and stream["decode_s_last"] > 0
    assert {"asr_final", "slm", "after_end"} <= set(message["latency_s"])


@pytest.mark.parametrize("send, message", [
    (lambda ws: ws.send_bytes(b"\x00\x01\x02"), "whole 16-bit samples"),
    (lambda ws: ws.send_text("stop please"), 'only {"type": "end"} is understood'),
])  # a stream past the length limit gets the final of what fits: tests/test_server_abuse.py
def test_a_bad_stream_gets_an_error_message_and_is_closed(pipeline, send, message):
    with TestClient(create_app(pipeline, replace(SETTINGS, max_audio_seconds=3.0))) as client:
        with client.websocket_connect("/v1/stream") as ws:
            send(ws)
            reply, _ = receive_until(ws, ("error", "final"))
            assert reply["type"] == "error" and message in reply["error"]
            with pytest.raises(WebSocketDisconnect):
                ws.receive_json()
        assert client.get("/health").json()["status"] == "ok"


def test_a_model_failure_in_a_stream_is_an_error_message_and_the_server_goes_on(pipeline, clips, monkeypatch):
    broken = copy.copy(pipeline)
    monkeypatch.setattr(broken, "transcribe", lambda audio: (_ for _ in ()).throw(RuntimeError("decoder broke\nmore")))
    audio = load_audio(clips[0], SR)
    with TestClient(create_app(broken, replace(SETTINGS, stream_interval=0.5))) as client:
        with client.websocket_connect("/v1/stream") as ws:
            for chunk in pcm16_chunks(audio):
                ws.send_bytes(chunk)
            ws.send_text(json.dumps({"type": "end"}))
            message, _ = receive_until(ws)
        assert message == {"type": "error", "error": "internal error: decoder broke"}
        assert client.get("/health").json()["status"] == "ok"
        assert client.post("/v1/respond", json={"text": "hello"}).status_code == 200


def test_stream_finals_carry_the_tool_calls_and_the_withheld_answer(pipeline, clips, monkeypatch):
    """A stream's final and each hands-free turn's give the answer as /v1/pipeline does: the response, the calls
    executed into it and, when the model was unsure, its own answer withheld."""
    declined = ExecutedText("Sorry, I can't call grandma.", withheld="Calling Chloe.")
    monkeypatch.setattr(VoicePipeline, "respond_with_calls", lambda self, transcript: declined)
    monkeypatch.setattr(VoicePipeline, "answer_with_calls",
                        lambda self, transcript, confidence: (declined, True, None))
    _, chunks, _ = two_turns(clips)
    with TestClient(create_app(pipeline, SETTINGS)) as client:
        with client.websocket_connect("/v1/stream?turns=false") as ws:
            for chunk in pcm16_chunks(load_audio(clips[0], SR)):
                ws.send_bytes(chunk)
            ws.send_text(json.dumps({"type": "end"}))
            message, _ = receive_until(ws)
        turns = [m for m in take_turns(client, chunks) if m["type"] == "final"]
    assert len(turns) == 2
    for final in (message, *turns):
        assert (final["response"], final["withheld"], final["tool_calls"]) == (declined.text, "Calling Chloe.", [])


def test_a_stream_too_long_for_the_language_model_still_gets_its_transcript(pipeline, clips, monkeypatch):
    """A transcript that does not fit the language model's context (3 min of speech fill the demo model's) is the
    final's all the same, with no answer and the reason; one turn of a hands-free session likewise."""
    def too_long(self, transcript):
        raise ContextLengthError("the prompt is 500 tokens and the model's context is 448: no room for an answer")
    monkeypatch.setattr(VoicePipeline, "respond_with_calls", too_long)
    audio = load_audio(clips[0], SR)
    talk, chunks, _ = two_turns(clips)
    with TestClient(create_app(pipeline, SETTINGS)) as client:
        with client.websocket_connect("/v1/stream?turns=false") as ws:
            for chunk in pcm16_chunks(audio):
                ws.send_bytes(chunk)
            ws.send_text(json.dumps({"type": "end"}))
            message, _ = receive_until(ws)
        turns = [m for m in take_turns(client, chunks) if m["type"] in ("final", "error")]
    heard = (np.frombuffer(b"".join(pcm16_chunks(audio)), dtype="<i2") / 32768.0).astype(np.float32)
    assert message["type"] == "final" and message["transcript"] == pipeline.transcribe(heard)[0]
    assert message["response"] is None and message["note"].startswith("language model skipped: the prompt is 500")
    assert [(m["type"], m["response"]) for m in turns] == [("final", None), ("final", None)]
    assert all(m["transcript"] and "model's context is 448" in m["note"] for m in turns)


def test_redecode_stream_decodes_the_whole_buffer_every_interval():
    decoded = []

    def transcribe(audio):
        decoded.append(len(audio))
        return f"{len(audio)} samples"
    speech = (0.3 * np.random.default_rng(0).standard_normal(SR // 4)).astype(np.float32)
    stream = RedecodeStream(transcribe, SR, interval_s=1.0)
    partials = [stream.feed(speech) for _ in range(10)]  # 2.5 s in quarter seconds
    assert decoded == [SR, 2 * SR] and [p for p in partials if p] == [f"{SR} samples", f"{2 * SR} samples"]
    assert stream.finish() == f"{10 * SR // 4} samples" and decoded[-1] == 10 * SR // 4
    report = stream.report()
    assert report["decodes"] == 3 and report["audio_s"] == 2.5 and report["interval_s"] == 1.0
    stream.decode_seconds[-1] = 3.0  # a slow decode: the next one waits for 3 s of new audio, not 1 s
    assert [stream.feed(speech) for _ in range(12)].count(None) == 11 and decoded[-1] == 22 * SR // 4
    silent = RedecodeStream(transcribe, SR, interval_s=1.0)
    assert silent.feed(np.zeros(2 * SR, dtype=np.float32)) == "" and silent.finish() == "" and len(decoded) == 4


def test_server_settings_name_the_flag():
    for field, value, message in (("queue_size", 0, "--queue-size must be >= 1"),
                                  ("max_audio_seconds", 0, "--max-audio-seconds must be in \\(0, 86400\\]"),
                                  ("max_audio_seconds", float("nan"), "--max-audio-seconds must be in .*got nan"),
                                  ("max_sample_rate", 4000, "--max-sample-rate must be in 8000..768000"),
                                  ("max_channels", 0, "--max-channels must be in 1..64"),
                                  ("stream_idle_seconds", 0, "--stream-idle-seconds must be > 0"),
                                  ("stream_interval", -1, "--stream-interval must be > 0"),
                                  ("turn_silence", 0, "--turn-silence must be > 0"),
                                  ("vad_threshold", 1.5, "--vad-threshold must be in \\(0, 1\\)"),
                                  ("port", 70000, "--port must be in 0..65535")):
        with pytest.raises(ServerSettingsError, match=message):
            replace(ServerSettings(), **{field: value}).validate()


def test_a_streaming_model_serves_the_websocket_chunk_by_chunk(pipeline, clips, tiny_streaming_model):
    """With a cache-aware model the partials and the final transcript are the streaming model's, the same
    whatever the message sizes, and equal to streaming the whole recording at once."""
    audio = np.concatenate([load_audio(path, SR) for path in clips[:2]])
    app = create_app(pipeline, SETTINGS, streaming_model=tiny_streaming_model)
    finals = []
    with TestClient(app) as client:
        assert client.get("/health").json()["stream_decoder"].startswith("cache-aware")
        for seconds in (0.1, 0.37):
            with client.websocket_connect("/v1/stream") as ws:
                for chunk in pcm16_chunks(audio, seconds):
                    ws.send_bytes(chunk)
                ws.send_text(json.dumps({"type": "end"}))
                message, before = receive_until(ws)
                partials = [m["text"] for m in before if m["type"] == "partial"]
            finals.append(message)
            assert partials and all(a != b for a, b in zip(partials, partials[1:])), partials
    heard = (np.frombuffer(b"".join(pcm16_chunks(audio)), dtype="<i2") / 32768.0).astype(np.float32)
    expected = transcribe_streaming(tiny_streaming_model, heard)[0].strip()
    assert expected, "the fixture model should say something, or the check below could not fail"
    for message in finals:
        assert message["transcript"] == expected and message["response"] == pipeline.respond(expected)
        assert message["stream"]["decoder"] == "cache-aware" and message["stream"]["chunks"] > 2
        assert message["stream"]["how"].startswith("cache-aware")
        assert message["confidence"] is None and message["understood"] is True  # no word confidences: unchecked
    # the offline model's own transcript differs: the answer must come from the streaming model's words
    assert expected != pipeline.transcribe(heard)[0]


# ---------------------------------------------------------------- hands-free turns


def two_turns(clips, gap_s: float = 1.5):
    """Two of the micro model's utterances with ``gap_s`` of silence between, as the socket hears them (PCM16)."""
    talk = compose([load_audio(path, SR) for path in clips[:2]], [0.6, gap_s, 1.2])
    chunks = pcm16_chunks(talk.audio, 0.1)
    return talk, chunks, (np.frombuffer(b"".join(chunks), dtype="<i2") / 32768.0).astype(np.float32)


def take_turns(client, chunks, path: str = "/v1/stream?turns=true") -> list[dict]:
    """Stream ``chunks``, then end; every message up to "done"."""
    with client.websocket_connect(path) as ws:
        for chunk in chunks:
            ws.send_bytes(chunk)
        ws.send_text(json.dumps({"type": "end"}))
        done, messages = receive_until(ws, ("done",))
        with pytest.raises(WebSocketDisconnect):
            ws.receive_json()
    return messages + [done]


def test_turns_answer_each_utterance_when_the_speaker_stops_on_one_socket(pipeline, clips):
    talk, chunks, heard = two_turns(clips)
    with TestClient(create_app(pipeline, replace(SETTINGS, stream_interval=0.5))) as client:
        messages = take_turns(client, chunks)
        assert client.get("/health").json()["queue"]["active"] == 0
    finals = [m for m in messages if m["type"] == "final"]
    events = [(m["type"], m.get("turn")) for m in messages if m["type"] != "partial"]
    # the audio arrives faster than real time here, so turn 2 may start before turn 1's final is out; each turn's
    # messages come in their order, the finals in turn order, "done" last
    assert sorted(events[:-1]) == sorted([(kind, turn) for turn in (1, 2)
                                          for kind in ("speech_start", "speech_end", "final")])
    for turn in (1, 2):
        assert [kind for kind, n in events if n == turn] == ["speech_start", "speech_end", "final"]
    assert [n for kind, n in events if kind == "final"] == [1, 2] and events[-1] == ("done", None)
    assert messages[-1]["turns"] == 2 and messages[-1]["vad_s"] > 0
    # each final is the pipeline's transcript and answer of that turn's audio: the turn taker's cut of the stream
    taker = TurnTaker(SETTINGS.vad_settings())
    ends = [e for e in taker.feed(heard) + taker.finish() if e.kind == "speech_end"]
    assert len(ends) == 2
    for final, end, (start, stop) in zip(finals, ends, talk.speech):
        want = pipeline.transcribe(end.audio)[0]
        assert want, "the micro model should hear some tokens, or the transcripts could not be told apart"
        assert final["transcript"] == want and final["response"] == pipeline.respond(want)
        assert stop / SR - 0.1 <= final["speech_end_s"] <= stop / SR + 0.2  # where the speech stopped
        # answered during the silence that ended the turn, before the VAD had decided it had ended
        assert final["speculative"] is True and {"asr_final", "slm", "after_end"} <= set(final["latency_s"])
    # partials name their turn; how many there are depends on the machine's load (a partial still waiting for the
    # model is dropped when the turn's answer starts), so a busy machine may send none
    partials = [m for m in messages if m["type"] == "partial"]
    assert all(m["turn"] in (1, 2) for m in partials)


def test_turns_hear_no_speech_in_room_noise(pipeline):
    noise = room_noise(10.0, SR, seed=4, level_dbfs=-35.0)
    with TestClient(create_app(pipeline, SETTINGS)) as client:
        messages = take_turns(client, pcm16_chunks(noise, 0.1))
    assert messages == [{"type": "done", "turns": 0, "audio_s": 10.0, "vad_s": messages[-1]["vad_s"]}]


def test_turns_is_a_server_option_a_client_can_decline(pipeline, clips):
    _, chunks, _ = two_turns(clips)
    with TestClient(create_app(pipeline, replace(SETTINGS, turns=True))) as client:
        assert client.get("/health").json()["turns"]["default"] is True
        by_default = take_turns(client, chunks, "/v1/stream")
        with client.websocket_connect("/v1/stream?turns=false") as ws:
            for chunk in chunks:
                ws.send_bytes(chunk)
            ws.send_text(json.dumps({"type": "end"}))
            declined, _ = receive_until(ws)
    assert [m["turn"] for m in by_default if m["type"] == "final"] == [1, 2]
    assert declined["type"] == "final" and "turn" not in declined  # one final for the whole recording


def test_a_failed_turn_is_an_error_naming_it_and_the_session_goes_on(pipeline, clips, monkeypatch):
    broken = copy.copy(pipeline)
    calls = []

    def transcribe_timed(audio):  # a turn's final decode (with word confidences)
        calls.append(len(audio))
        if len(calls) == 1:
            raise RuntimeError("decoder broke\nmore")
        return pipeline.transcribe_timed(audio)
    monkeypatch.setattr(broken, "transcribe_timed", transcribe_timed)
    _, chunks, _ = two_turns(clips)
    with TestClient(create_app(broken, replace(SETTINGS, stream_interval=100.0))) as client:  # no partial decodes
        messages = take_turns(client, chunks)
    answered = [(m["type"], m.get("turn")) for m in messages if m["type"] in ("final", "error")]
    assert answered == [("error", 1), ("final", 2)] and messages[-1]["turns"] == 1
    assert [m for m in messages if m["type"] == "error"][0]["error"] == "internal error: decoder broke"


def test_the_stream_client_plays_turns_over_a_real_socket(pipeline, clips):
    """duet.serving.stream_client (what the benches drive the server with) against uvicorn on a loopback port."""
    from duet.serving.stream_client import play
    from tests.test_server_browser import serve_in_thread

    talk, _, _ = two_turns(clips)
    server, url = serve_in_thread(create_app(pipeline, SETTINGS))
    try:
        played = play(url, talk.audio, realtime=False, timeout_s=60)
        plain = play(url, talk.audio[:SR], query="turns=false", realtime=False, timeout_s=60, until=("final",))
    finally:
        server.should_exit = True
    assert [m["turn"] for _, m in played.of_type("final")] == [1, 2] and played.of_type("done")[0][1]["turns"] == 2
    times = [at for at, _ in played.messages]
    assert times == sorted(times) and times[0] >= played.start
    assert [m["type"] for _, m in plain.messages][-1] == "final"


def test_turns_with_a_streaming_model_finish_each_turns_own_stream(pipeline, clips, tiny_streaming_model):
    """Each turn streams through its own cache-aware session: the final is that model's transcript of the audio the
    turn was given (from its pre-roll to where the VAD ended it), whatever the offline model would say."""
    _, chunks, _ = two_turns(clips)
    with TestClient(create_app(pipeline, SETTINGS, streaming_model=tiny_streaming_model)) as client:
        messages = take_turns(client, chunks)
    finals = [m for m in messages if m["type"] == "final"]
    assert [m["turn"] for m in finals] == [1, 2] and messages[-1]["turns"] == 2
    taker, given = TurnTaker(SETTINGS.vad_settings()), {1: [], 2: []}
    for chunk in chunks:  # as the server fed it: one message at a time
        samples = (np.frombuffer(chunk, dtype="<i2") / 32768.0).astype(np.float32)
        for event in taker.feed(samples):
            if event.kind == "audio":
                given[event.turn].append(event.audio)
    for final in finals:
        expected = transcribe_streaming(tiny_streaming_model, np.concatenate(given[final["turn"]]))[0].strip()
        assert final["transcript"] == expected and final["stream"]["decoder"] == "cache-aware"
        assert final["speculative"] is False
        assert final["response"] == (pipeline.respond(expected) if expected else None)


# ---------------------------------------------------------------- tools/serve.py


def test_serve_names_a_missing_model_and_a_bad_setting(repo_root, python, tmp_path, monkeypatch):
    script = str(repo_root / "tools" / "serve.py")
    monkeypatch.chdir(repo_root)  # where the command runs: its hint is typed there
    missing = subprocess.run([python, script, "--asr-model", str(tmp_path / "none.nemo")], capture_output=True,
                             text=True, cwd=repo_root)
    assert missing.returncode == 2 and len(missing.stderr.strip().splitlines()) == 1
    # (then the --slm-model, when the demo's is missing too; the flag or the newest model the recipes made)
    assert missing.stderr.startswith(f"serve: error: --asr-model {tmp_path / 'none.nemo'} does not exist "
                                      f"(run {python_command('tools/demo.py')} first, or pass --asr-model")
    bad = subprocess.run([python, script, "--queue-size", "0"], capture_output=True, text=True, cwd=repo_root)
    assert bad.returncode == 2 and bad.stderr.strip() == "serve: error: --queue-size must be >= 1, got 0"
