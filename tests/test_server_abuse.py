"""duet.serving against hostile and careless clients (issue #55): uploads that name other files, tiny files that
decode to gigabytes, bodies that never say their length, options that overflow the model, cut recordings, a full
queue, strangers (no key, another page, another host name), streams faster than real time or gone quiet, a full disk.

Same in-memory models as tests/test_server.py, driven with FastAPI's TestClient, and uvicorn on a loopback port
where the socket itself matters (keepalive pings).
"""

from __future__ import annotations

import base64
import errno
import json
import shutil
import threading
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import soundfile
import starlette.formparsers
from fastapi.testclient import TestClient
from starlette.websockets import WebSocketDisconnect

import duet.serving.errors
import duet.serving.responses
import duet.serving.uploads
from duet.asr.inference import load_audio
from duet.errors import DuetError
from duet.io import audio_file_problem
from duet.pipeline import VoicePipeline
from duet.serving.app import create_app
from duet.serving.guard import BODY_SLACK_BYTES, exposure_warning
from duet.serving.settings import ServerSettings, ServerSettingsError
from tests.test_server import SETTINGS, SR, clips, pcm16_chunks, pipeline, receive_until, upload  # noqa: F401
from tests.test_server_browser import serve_in_thread

KEY = "test-key-0123456789"


@pytest.fixture(scope="module")
def client(pipeline):
    with TestClient(create_app(pipeline, SETTINGS)) as client:
        yield client


@pytest.fixture(scope="module")
def strict_client(pipeline):
    """3 s of audio, 200 KiB bodies."""
    with TestClient(create_app(pipeline, replace(SETTINGS, max_audio_seconds=3.0, max_upload_mb=0.2))) as client:
        yield client


def refused(reply, status: int, *words: str) -> str:
    """The error of ``reply``, after checking its status, that it names ``words`` and no server path."""
    assert reply.status_code == status, reply.text
    error = reply.json()["error"]
    assert all(word in error for word in words), error
    assert "/tmp" not in error and "/work" not in error and "duet-upload" not in error, error
    return error


# ---------------------------------------------------------------- uploads decoded as audio only


@pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="ffmpeg not installed: the uploads it reads not checked")
def test_a_playlist_or_concat_list_naming_a_server_file_is_refused(client, clips, tmp_path):
    """ffmpeg would follow them to the sample on the server's disk (HLS plays a local .flac, whatever the name)."""
    target = clips[0].resolve()
    playlist = f"#EXTM3U\n#EXT-X-TARGETDURATION:30\n#EXTINF:20.0,\n{target}\n#EXT-X-ENDLIST\n".encode()
    concat = f"ffconcat version 1.0\nfile '{target}'\n".encode()
    local = f"ffconcat version 1.0\nfile '{target.name}'\n".encode()  # a name beside the upload
    for name, body in (("list.m3u8", playlist), ("clip.flac", playlist), ("list.ffconcat", concat),
                       ("list.txt", local)):
        reply = client.post("/v1/audio/transcriptions", files={"file": (name, body, "application/octet-stream")})
        refused(reply, 400, "file: cannot decode the audio")
    assert client.post("/v1/audio/transcriptions", files=upload(clips[0])).status_code == 200


def test_a_client_filename_never_reaches_the_file_system(client, clips):
    for name in ("a\x00.flac", "../../etc/passwd", "x.fl\x00ac", "name." + "a" * 300):
        reply = client.post("/v1/audio/transcriptions", files={"file": (name, clips[0].read_bytes(), "audio/flac")})
        assert reply.status_code == 200, (name, reply.text)
    assert duet.serving.uploads.upload_suffix("a\x00.flac") == ".flac" and duet.serving.uploads.upload_suffix("x/../y") == ""


# ---------------------------------------------------------------- limits counted in samples


def test_high_rate_many_channel_audio_is_refused_from_its_header(strict_client, tmp_path, monkeypatch):
    def never(*args):
        raise AssertionError("decoded although the header said enough")
    monkeypatch.setattr(duet.serving.uploads, "read_mono_blocks", never)
    monkeypatch.setattr(duet.serving.uploads, "decode_with_ffmpeg", never)
    fast = tmp_path / "fast.flac"
    soundfile.write(fast, np.zeros((SR // 10, 8), dtype=np.float32), 384000)  # 8 channels at 384 kHz
    wide = tmp_path / "wide.wav"
    soundfile.write(wide, np.zeros((SR // 10, 16), dtype=np.float32), 16000)
    many = tmp_path / "many.flac"  # 2.9 s (under the 3 s limit) of 8 channels at 48 kHz: 1.1 M samples
    soundfile.write(many, np.zeros((int(2.9 * 48000), 8), dtype=np.float32), 48000)
    assert many.stat().st_size < 50_000
    refused(strict_client.post("/v1/audio/transcriptions", files=upload(fast)), 400,
            "file: sample rate 384000 Hz is above the server's limit of 96000 Hz")
    refused(strict_client.post("/v1/audio/transcriptions", files=upload(wide)), 400,
            "file: 16 channels are more than the server's limit of 8")
    refused(strict_client.post("/v1/audio/transcriptions", files=upload(many)), 413,
            "1,113,600 samples, more than the limit of 288,000")


def test_a_header_that_understates_the_length_is_stopped_while_decoding(pipeline, tmp_path):
    """The samples are counted as they are read: a header claiming less than the file holds gains nothing."""
    audio = np.zeros(int(5 * SR), dtype=np.float32)
    path = tmp_path / "long.wav"
    soundfile.write(path, audio, SR)
    settings = replace(SETTINGS, max_audio_seconds=3.0)
    with pytest.raises(duet.serving.errors.RequestError) as error:
        duet.serving.uploads.read_mono_blocks(path, SR, 1, settings, "file", SR)
    assert error.value.status == 413


@pytest.mark.parametrize("rate, frames", [(16000, 100_000), (22050, 100_003), (44100, 300_001), (96000, 65_536)])
def test_the_block_reader_gives_the_samples_duet_io_reads(tmp_path, rate, frames):
    """Averaged to mono and resampled block by block: the samples read_mono gives (librosa.resample of the whole)."""
    from duet.io import read_mono

    path = tmp_path / "three.wav"
    soundfile.write(path, (0.1 * np.random.default_rng(1).standard_normal((frames, 3))).astype(np.float32), rate)
    got = duet.serving.uploads.read_mono_blocks(path, rate, 3, SETTINGS, "file", SR)
    want = read_mono(str(path), SR)
    assert np.array_equal(got, want)


def test_the_block_readers_output_grows_past_the_headers_length_and_is_cut_or_padded_to_the_size_asked():
    out = duet.serving.uploads.MonoOut(3)
    out.put(np.array([1, 2], dtype=np.float32))
    out.put(np.array([3, 4, 5], dtype=np.float32))  # past the 3 the header promised
    assert out.samples().tolist() == [1, 2, 3, 4, 5]
    assert out.samples(4).tolist() == [1, 2, 3, 4]
    assert out.samples(7).tolist() == [1, 2, 3, 4, 5, 0, 0]


# ---------------------------------------------------------------- bodies bounded as they arrive


def test_a_chunked_body_over_the_limit_is_cut_off_before_the_parser_writes_it(strict_client, clips, monkeypatch):
    written = []

    class CountedSpool(starlette.formparsers.SpooledTemporaryFile):
        def write(self, data):
            written.append(len(data))
            return super().write(data)
    monkeypatch.setattr(starlette.formparsers, "SpooledTemporaryFile", CountedSpool)
    boundary = "duetboundary"
    head = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"big.wav\"\r\n"
            "Content-Type: audio/wav\r\n\r\n").encode()
    limit = int(0.2 * 1024 * 1024)

    def body():  # no Content-Length: httpx sends it chunked
        yield head
        for _ in range(40):  # 2.5 MiB, 12 times the limit
            yield b"\x00" * (64 * 1024)
        yield f"\r\n--{boundary}--\r\n".encode()
    reply = strict_client.post("/v1/audio/transcriptions", content=body(),
                               headers={"content-type": f"multipart/form-data; boundary={boundary}"})
    refused(reply, 413, "larger than the upload limit of 0.2 MiB")
    assert sum(written) <= limit + BODY_SLACK_BYTES
    assert strict_client.get("/health").json()["queue"]["active"] == 0
    assert strict_client.post("/v1/audio/transcriptions", files=upload(clips[0])).status_code == 200


# ---------------------------------------------------------------- generation bounds


BAD_OPTIONS = [({"temperature": float("nan")}, "temperature"), ({"temperature": float("inf")}, "temperature"),
               ({"temperature": 1e-45}, "temperature"), ({"repetition_penalty": float("inf")}, "repetition_penalty"),
               ({"repetition_penalty": 1e-300}, "repetition_penalty"), ({"num_beams": 10 ** 23}, "num_beams"),
               ({"num_beams": 5000, "strategy": "beam"}, "num_beams"), ({"max_new_tokens": 10 ** 23}, "max_new_tokens"),
               ({"top_p": float("nan")}, "top_p"), ({"max_new_tokens": -1}, "max_new_tokens"),
               ({"min_token_prob": 2}, "min_token_prob"), ({"min_token_prob": float("nan")}, "min_token_prob")]


@pytest.mark.parametrize("options, field", BAD_OPTIONS)
def test_each_bad_generation_value_is_a_400_naming_its_field(client, clips, options, field):
    body = json.dumps({"text": "set a timer", **options})  # NaN and Infinity as Python's json writes them
    refused(client.post("/v1/respond", content=body, headers={"content-type": "application/json"}), 400, field)
    form = {name: str(value) for name, value in options.items()}
    refused(client.post("/v1/pipeline", files=upload(clips[0]), data=form), 400, field)


def test_a_huge_top_k_and_text_at_the_limits_are_answered_not_failed(client, pipeline):
    assert client.post("/v1/respond", json={"text": "hi", "top_k": 10 ** 23, "strategy": "sample"}).status_code == 200
    refused(client.post("/v1/respond", json={"text": "word " * 2000}), 400,
            "text: 10000 characters, more than the limit of 4000")


# ---------------------------------------------------------------- truncated audio


@pytest.mark.parametrize("suffix", [".flac", ".wav"])
def test_audio_cut_in_half_is_refused_as_tools_pipeline_refuses_it(client, clips, tmp_path, suffix):
    whole = tmp_path / f"whole{suffix}"
    soundfile.write(whole, load_audio(clips[0], SR), SR)
    data = whole.read_bytes()
    half = tmp_path / f"half{suffix}"
    half.write_bytes(data[:len(data) // 2])
    refused(client.post("/v1/audio/transcriptions", files=upload(half)), 400, "file: cannot decode the audio",
            "truncated")
    if suffix == ".wav":  # the one check tools/pipeline.py makes before reading (a cut FLAC fails in the decoder)
        assert "truncated: the header promises" in audio_file_problem(half)
    assert client.post("/v1/audio/transcriptions", files=upload(whole)).status_code == 200


# ---------------------------------------------------------------- a full queue


def test_busy_answers_carry_retry_after_and_health_gives_the_queue_times(pipeline, clips, monkeypatch):
    release, entered = threading.Event(), threading.Event()
    real = VoicePipeline.transcribe_segments

    def held(self, audio, words=True):
        entered.set()
        release.wait(30)
        return real(self, audio, words=words)
    with TestClient(create_app(pipeline, replace(SETTINGS, queue_size=1))) as client:
        assert client.post("/v1/audio/transcriptions", files=upload(clips[0])).status_code == 200
        monkeypatch.setattr(VoicePipeline, "transcribe_segments", held)
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(1) as pool:
            first = pool.submit(client.post, "/v1/audio/transcriptions", files=upload(clips[0]))
            assert entered.wait(30)
            busy = client.post("/v1/respond", json={"text": "hi"})
            release.set()
            assert first.result(60).status_code == 200
        queue = client.get("/health").json()["queue"]
    error = refused(busy, 503, "server busy")
    assert 1 <= int(busy.headers["Retry-After"]) <= 60 and f"retry in {busy.headers['Retry-After']} s" in error
    assert queue["calls"] == 2 and queue["wait_s"]["max"] >= 0 and queue["run_s"]["max"] > 0
    assert queue["busy_s"] >= queue["run_s"]["max"]  # both calls' time on the thread, what a load bench divides


# ---------------------------------------------------------------- strangers


def test_the_api_key_is_needed_on_http_and_the_websocket(pipeline, clips):
    with TestClient(create_app(pipeline, replace(SETTINGS, api_key=KEY))) as client:
        refused(client.post("/v1/respond", json={"text": "hi"}), 401, "API key")
        refused(client.post("/v1/respond", json={"text": "hi"}, headers={"authorization": "Bearer wrong-key-0000"}),
                401, "API key")
        assert client.post("/v1/respond", json={"text": "hi"},
                           headers={"authorization": f"Bearer {KEY}"}).status_code == 200
        for public in ("/", "/health", "/static/app.js"):
            assert client.get(public).status_code == 200
        with pytest.raises(WebSocketDisconnect) as closed:
            with client.websocket_connect("/v1/stream") as ws:
                ws.receive_json()
        assert closed.value.code == 1008
        with client.websocket_connect("/v1/stream", headers={"authorization": f"Bearer {KEY}"}) as ws:
            for chunk in pcm16_chunks(load_audio(clips[0], SR)):
                ws.send_bytes(chunk)
            ws.send_text(json.dumps({"type": "end"}))
            assert receive_until(ws)[0]["type"] == "final"
    with pytest.raises(ServerSettingsError, match="--api-key must be at least 8"):
        replace(SETTINGS, api_key="short").validate()


def key_subprotocol(key: str) -> str:
    return "duet.key." + base64.urlsafe_b64encode(key.encode()).decode().rstrip("=")


def test_a_browser_websocket_offers_the_key_as_a_subprotocol(pipeline, clips):
    """A browser cannot set Authorization on a WebSocket (duet/serving/web/app.js offers the key's subprotocol beside
    "duet"): the server agrees to "duet", never echoing the key's."""
    key = KEY + "+/"  # base64url's "-" and "_" on the wire
    with TestClient(create_app(pipeline, replace(SETTINGS, api_key=key))) as client:
        with client.websocket_connect("/v1/stream", subprotocols=["duet", key_subprotocol(key)]) as ws:
            assert ws.accepted_subprotocol == "duet"
            for chunk in pcm16_chunks(load_audio(clips[0], SR)):
                ws.send_bytes(chunk)
            ws.send_text(json.dumps({"type": "end"}))
            assert receive_until(ws)[0]["type"] == "final"
        for offered in (["duet", key_subprotocol("wrong-key-0000")], ["duet", "duet.key.%%%"], ["duet"]):
            with pytest.raises(WebSocketDisconnect) as closed:
                with client.websocket_connect("/v1/stream", subprotocols=offered) as ws:
                    ws.receive_json()
            assert closed.value.code == 1008, offered
        # on HTTP only the header counts
        refused(client.post("/v1/respond", json={"text": "hi"},
                            headers={"sec-websocket-protocol": key_subprotocol(key)}), 401, "API key")


def test_other_host_names_and_other_pages_are_refused(pipeline):
    with TestClient(create_app(pipeline, ServerSettings()), base_url="http://127.0.0.1:8000") as client:
        assert client.get("/health").status_code == 200  # an IP address: no page can re-point it
        refused(client.get("/health", headers={"host": "attacker.example:8000"}), 400, "Host 'attacker.example:8000'")
        assert client.get("/health", headers={"host": "localhost:8000"}).status_code == 200
        assert client.get("/health", headers={"host": "[::1]:8000"}).status_code == 200
        refused(client.post("/v1/respond", json={"text": "hi"}, headers={"origin": "http://evil.example"}), 403,
                "Origin 'http://evil.example' is not allowed")
        assert client.post("/v1/respond", json={"text": "hi"},
                           headers={"origin": "http://127.0.0.1:8000"}).status_code == 200  # the page's own
        for headers in ({"host": "attacker.example"}, {"origin": "http://evil.example"}, {"origin": "null"}):
            with pytest.raises(WebSocketDisconnect) as closed:  # DNS rebinding, a cross-site socket
                with client.websocket_connect("ws://127.0.0.1:8000/v1/stream", headers=headers) as ws:
                    ws.receive_json()
            assert closed.value.code == 1008
        own_page = {"origin": "http://127.0.0.1:8000"}
        with client.websocket_connect("ws://127.0.0.1:8000/v1/stream", headers=own_page) as ws:
            ws.send_text(json.dumps({"type": "end"}))
            assert receive_until(ws)[0]["type"] == "final"
        assert client.get("/docs").status_code == 404 and client.get("/openapi.json").status_code == 200
    listed = replace(ServerSettings(), allowed_hosts=("box.lan",), allowed_origins=("https://app.example",))
    with TestClient(create_app(pipeline, listed), base_url="http://box.lan:8000") as client:
        assert client.post("/v1/respond", json={"text": "hi"},
                           headers={"origin": "https://app.example"}).status_code == 200


def test_listening_beyond_loopback_without_a_key_warns():
    assert exposure_warning(ServerSettings()) is None
    assert exposure_warning(ServerSettings(host="::1")) is None
    assert "without --api-key" in exposure_warning(ServerSettings(host="0.0.0.0"))
    assert exposure_warning(ServerSettings(host="0.0.0.0", api_key=KEY)) is None


def test_serve_reads_the_key_from_a_file_and_names_a_bad_one(repo_root, tmp_path):
    from tests.script_helpers import load_script

    serve = load_script(repo_root / "tools" / "serve.py", "serve_api_key")
    key_file = tmp_path / "key.txt"
    key_file.write_text(f"  {KEY}\n")
    assert serve.read_api_key(key_file) == KEY
    empty = tmp_path / "empty.txt"
    empty.write_text("\n")
    for path, message in ((empty, "empty"), (tmp_path / "none.txt", "cannot read it")):
        with pytest.raises(DuetError, match=message):
            serve.read_api_key(path)


# ---------------------------------------------------------------- streams


def slow_decodes(pipeline, monkeypatch, seconds: float) -> None:
    """Every decode of the pipeline's offline model takes ``seconds`` longer: decoding falls behind the audio."""
    real = type(pipeline).transcribe

    def slow(self, audio, *args, **kwargs):
        time.sleep(seconds)
        return real(self, audio, *args, **kwargs)
    monkeypatch.setattr(type(pipeline), "transcribe", slow)


def test_a_stream_faster_than_real_time_over_a_real_socket_gets_its_final(pipeline, clips, monkeypatch):
    """uvicorn pings every 0.3 s and gives up after 1.5 s without a pong: a server that stopped reading while it
    decodes would never see the pongs, and closed the socket with 1011 before the final."""
    from duet.serving.stream_client import play

    slow_decodes(pipeline, monkeypatch, 0.5)
    audio = np.tile(load_audio(clips[0], SR), 30 * SR // len(load_audio(clips[0], SR)) + 1)[:30 * SR]
    server, url = serve_in_thread(create_app(pipeline, replace(SETTINGS, stream_interval=1.0)),
                                  ws_ping_interval=0.3, ws_ping_timeout=1.5)
    try:
        played = play(url, audio, query="turns=false", piece_s=0.25, realtime=False,
                      timeout_s=120, until=("final",))
    finally:
        server.should_exit = True
    kinds = [m["type"] for _, m in played.messages]
    assert "error" not in kinds and kinds[-1] == "final", kinds
    final = played.of_type("final")[0][1]
    assert final["stream"]["audio_s"] == pytest.approx(30.0, abs=0.01)
    # behind by more than CATCH_UP_SECONDS, decoding took what waited in one piece: fewer decodes than seconds
    assert final["stream"]["decodes"] < 30


def test_a_stream_that_goes_quiet_gets_its_final_and_is_closed(pipeline, clips):
    with TestClient(create_app(pipeline, replace(SETTINGS, stream_idle_seconds=0.5))) as client:
        with client.websocket_connect("/v1/stream") as ws:
            for chunk in pcm16_chunks(load_audio(clips[0], SR)):
                ws.send_bytes(chunk)
            final, _ = receive_until(ws)  # no {"type": "end"}: the idle timeout ends the stream
            with pytest.raises(WebSocketDisconnect):
                ws.receive_json()
    assert final["type"] == "final" and final["ended_by"].startswith("idle")
    assert final["transcript"] == pipeline.transcribe(
        (np.frombuffer(b"".join(pcm16_chunks(load_audio(clips[0], SR))), dtype="<i2") / 32768.0).astype(np.float32))[0]


def test_a_stream_past_the_length_limit_gets_the_final_of_what_fits_and_is_closed(pipeline, clips):
    """Before: an error and the close, the transcript of the minutes already sent lost."""
    limit_s = 1.1  # not a whole number of 0.25 s messages: the one that crosses it is cut
    chunks = pcm16_chunks(np.concatenate([load_audio(path, SR) for path in clips[:2]]))
    heard = (np.frombuffer(b"".join(chunks), dtype="<i2") / 32768.0).astype(np.float32)
    assert len(heard) > 2 * limit_s * SR
    with TestClient(create_app(pipeline, replace(SETTINGS, max_audio_seconds=limit_s))) as client:
        with client.websocket_connect("/v1/stream") as ws:
            for chunk in chunks:  # no {"type": "end"}: the limit ends the stream
                ws.send_bytes(chunk)
            final, before = receive_until(ws)
            with pytest.raises(WebSocketDisconnect) as closed:
                ws.receive_json()
        assert client.get("/health").json()["status"] == "ok"
    assert final["type"] == "final" and "error" not in [m["type"] for m in before]
    assert final["ended_by"].startswith("limit: the stream is longer than the limit of 1.1 s"), final["ended_by"]
    assert closed.value.code == 1009
    assert final["stream"]["audio_s"] == pytest.approx(limit_s)
    assert final["transcript"] == pipeline.transcribe(heard[:int(limit_s * SR)])[0]


def test_a_client_streaming_past_the_limit_over_a_real_socket_gets_the_final(pipeline, clips):
    from duet.serving.stream_client import play

    audio = load_audio(clips[0], SR)
    server, url = serve_in_thread(create_app(pipeline, replace(SETTINGS, max_audio_seconds=0.6)))
    try:
        # in real time: the server ends the stream while the client still has audio to send
        played = play(url, np.concatenate([audio] * 2), query="turns=false", timeout_s=60, until=("final",))
    finally:
        server.should_exit = True
    (_, final), = played.of_type("final")
    assert final["ended_by"].startswith("limit") and final["stream"]["audio_s"] == pytest.approx(0.6)


def test_a_hands_free_socket_that_goes_quiet_gets_its_turns_answered_and_is_closed(pipeline, clips):
    from tests.test_server import two_turns

    _, chunks, _ = two_turns(clips)
    settings = replace(SETTINGS, stream_idle_seconds=0.5, stream_interval=100.0)
    with TestClient(create_app(pipeline, settings)) as client:
        with client.websocket_connect("/v1/stream?turns=true") as ws:
            for chunk in chunks:
                ws.send_bytes(chunk)
            done, before = receive_until(ws, ("done",))  # no {"type": "end"}
            with pytest.raises(WebSocketDisconnect):
                ws.receive_json()
    assert [m["turn"] for m in before if m["type"] == "final"] == [1, 2] and done["turns"] == 2


# ---------------------------------------------------------------- a full disk


def test_a_server_fault_names_no_path(pipeline, clips, monkeypatch):
    def denied(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", "/tmp/duet-upload-x/upload.flac")
    monkeypatch.setattr(duet.serving.uploads, "open", denied, raising=False)
    with TestClient(create_app(pipeline, SETTINGS), raise_server_exceptions=False) as client:
        reply = client.post("/v1/audio/transcriptions", files=upload(clips[0]))
    assert refused(reply, 500) == "internal error: [Errno 13] Permission denied: '<path>'"


def test_a_full_disk_is_a_507_naming_no_path(client, clips, monkeypatch):
    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", "/tmp/duet-upload-x/upload.flac")
    monkeypatch.setattr(duet.serving.uploads, "open", full, raising=False)
    refused(client.post("/v1/audio/transcriptions", files=upload(clips[0])), 507, "no disk space")
    monkeypatch.undo()
    assert client.post("/v1/audio/transcriptions", files=upload(clips[0])).status_code == 200


def test_a_full_disk_while_the_body_is_parsed_is_a_507_not_a_400(client, clips, monkeypatch):
    class FullSpool(starlette.formparsers.SpooledTemporaryFile):
        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(starlette.formparsers, "SpooledTemporaryFile", FullSpool)
    refused(client.post("/v1/audio/transcriptions", files=upload(clips[0])), 507, "no disk space")


def test_a_full_disk_while_the_models_load_is_one_line_naming_the_path():
    with pytest.raises(DuetError) as error:
        with duet.serving.errors.disk_full_named("loading the models"):
            raise OSError(errno.ENOSPC, "No space left on device", "/tmp/tmpab12/model_weights.ckpt")
    assert str(error.value) == ("loading the models: no space left on the device holding "
                                "/tmp/tmpab12/model_weights.ckpt (free some, or point TMPDIR elsewhere)")
    with pytest.raises(PermissionError):  # any other OSError is not a full disk
        with duet.serving.errors.disk_full_named("loading the models"):
            raise PermissionError(errno.EACCES, "Permission denied")


# ---------------------------------------------------------------- the load bench backs off


def test_the_load_bench_backs_off_on_retry_after_instead_of_failing(pipeline, clips, repo_root):
    """Three clients on a one-slot queue: some are told to wait, none fails."""
    from tests.script_helpers import load_script

    bench = load_script(repo_root / "bench" / "serve_load.py", "serve_load_backoff")
    server, url = serve_in_thread(create_app(pipeline, replace(SETTINGS, queue_size=1)))
    try:
        result = bench.run_load(url, "/v1/audio/transcriptions", clips[0].read_bytes(),
                                "a.flac", 3, 3.0)
    finally:
        server.should_exit = True
    assert result["failures"] == 0 and result["requests"] >= 1 and result["busy_503_backed_off"] >= 1, result


# ---------------------------------------------------------------- OpenAI's response formats


def test_srt_and_vtt_cues_come_from_the_word_times(client, clips):
    verbose = client.post("/v1/audio/transcriptions", files=upload(clips[0]),
                          data={"response_format": "verbose_json"}).json()
    words = verbose["words"]
    assert words, "the micro model should emit some words"
    srt = client.post("/v1/audio/transcriptions", files=upload(clips[0]), data={"response_format": "srt"})
    vtt = client.post("/v1/audio/transcriptions", files=upload(clips[0]), data={"response_format": "vtt"})
    assert srt.status_code == vtt.status_code == 200 and vtt.headers["content-type"].startswith("text/vtt")
    blocks = [b.split("\n") for b in srt.text.strip().split("\n\n")]
    assert [b[0] for b in blocks] == [str(n) for n in range(1, len(blocks) + 1)]
    assert " ".join(b[2] for b in blocks) == verbose["text"]
    first = duet.serving.responses.cue_time(words[0]["start"], ",")
    assert blocks[0][1].startswith(f"{first} --> ") and all(len(b[2].split()) <= duet.serving.responses.CUE_WORDS for b in blocks)
    assert vtt.text.startswith("WEBVTT\n\n") and vtt.text.count(" --> ") == len(blocks)
    assert vtt.text.split("\n")[2] == blocks[0][1].replace(",", ".")


def test_cue_times_and_runs():
    assert duet.serving.responses.cue_time(3725.5, ",") == "01:02:05,500" and duet.serving.responses.cue_time(0.0004, ".") == "00:00:00.000"
    from duet.asr.words import Word

    class Segment:
        def __init__(self, start, end, words):
            self.start, self.end, self.words = start, end, words
            self.text = " ".join(w.word for w in words)
    words = [Word(f"w{i}", i * 0.5, i * 0.5 + 0.3, 1.0) for i in range(15)]
    cues = duet.serving.responses.subtitle_cues([Segment(0.0, 8.0, words), Segment(8.0, 9.0, [])])
    assert [(round(a, 2), round(b, 2)) for a, b, _ in cues] == [(0.0, 5.8), (6.0, 7.3)]
    assert cues[1][2] == "w12 w13 w14"
