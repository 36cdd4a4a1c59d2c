#!/usr/bin/env python
r"""Replay issue #55's probes of a hostile or careless client against tools/serve.py: each probe's answer against the
one it should get, and the server's memory before, at its peak during, and after each.

Usage:
  python bench/serve_abuse.py                          # starts tools/serve.py (the demo's models) on a free port
  python bench/serve_abuse.py -- --asr-model m.nemo --slm-model gpt2/   # options after -- go to tools/serve.py
  python bench/serve_abuse.py --url http://127.0.0.1:8000             # a server already running (no memory figures)
  python bench/serve_abuse.py --only stream                           # the probes whose name holds "stream"
  python bench/serve_abuse.py --only "real time" --stream-seconds 180 --stream-speed 4   # issue #55 stream target

The probes: an HLS playlist and an ffconcat list naming a sample on the server's disk; a 5 s FLAC of 8 channels at
384 kHz (39 kB); 300 s of 8 channels at 48 kHz (over the decoded-sample limit); 600 s of 48 kHz stereo silence (within
the limits, as 600 s of 96 kHz mono: its memory is the decoding's alone, silence skips the model) and --speech-seconds
of 48 kHz stereo speech (the sample utterances end to end: the model's memory too); a 256 MiB chunked body and a 1 GiB
Content-Length; language-model options out of range (5,000 and 10^23 beams, 10^23 new tokens, temperature nan, inf and
1e-45, repetition penalty inf and 1e-300) and 10 MB of text; a NUL byte in the filename; a FLAC and a WAV cut in half;
a foreign Host (DNS rebinding) over HTTP and the WebSocket, a foreign Origin, /docs; 16 requests at once on the
server's queue of 8 (each 503 must carry Retry-After); --stream-seconds of speech over the WebSocket as fast as the
socket takes it, or at --stream-speed times real time (it must get its final) and a client that goes quiet (final
after the server's idle timeout).

A started server gets --stream-idle-seconds 5 (so the quiet client's probe is short) and
--min-confidence 0. Printed as a table (probe, expected, got, ok, RSS before -> peak -> after in MiB, seconds) and
written as JSON (--json, default experiments/bench/serve_abuse.json); the exit code is 1 when any probe got an answer
it should not have.
"""

from __future__ import annotations

import argparse
import json
import select
import socket
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

import httpx
import numpy as np
import soundfile
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, RejectConnection, Request

from duet import SAMPLES_DIR
from duet.asr.inference import load_audio
from duet.serving.local_server import (PeakRss, add_bench_arguments, rss_mb, split_serve_args, start_server,
                                      stop_server)
from duet.serving.stream_client import SAMPLE_RATE, StreamClientError, play
from duet.foundation import EXPERIMENTS
from duet.foundation.errors import cli
from duet.foundation.files import write_text_atomic

IDLE_SECONDS = 5.0  # the started server's --stream-idle-seconds


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stream-seconds", type=float, default=100.0,
                        help="speech sent over the WebSocket as fast as it goes (default: 100)")
    parser.add_argument("--stream-speed", type=float, default=0.0,
                        help="the stream's pace in times real time (default: 0, as fast as the socket takes it)")
    parser.add_argument("--speech-seconds", type=float, default=600.0,
                        help="the 48 kHz stereo speech upload's length (default: 600, the server's limit)")
    parser.add_argument("--only", default=None, help="run only the probes whose name holds this text")
    add_bench_arguments(parser, "serve_abuse")
    return parser


def write_blocks(path: Path, seconds: float, rate: int, channels: int, noise: float = 0.0) -> Path:
    """``seconds`` of ``channels`` at ``rate`` written a second at a time (silence, or faint noise)."""
    rng = np.random.default_rng(0)
    with soundfile.SoundFile(str(path), "w", samplerate=rate, channels=channels) as out:
        for _ in range(int(seconds)):
            out.write((noise * rng.standard_normal((rate, channels))).astype(np.float32))
    return path


def write_speech(path: Path, seconds: float) -> Path:
    """``seconds`` of the sample utterances end to end, at 48 kHz in two channels (the most samples an upload may
    decode to at the server's defaults, when ``seconds`` is its 600 s limit)."""
    clips = [load_audio(p, 48000) for p in sorted((SAMPLES_DIR / "LibriSpeech" / "test-clean").rglob("*.flac"))]
    speech = np.resize(np.concatenate(clips), int(seconds * 48000))
    soundfile.write(path, np.stack([speech, speech], axis=1), 48000)
    return path


def cut_in_half(source: Path, path: Path) -> Path:
    data = source.read_bytes()
    path.write_bytes(data[:len(data) // 2])
    return path


def raw_post(url: str, headers: str, pieces) -> int:
    """POST over a raw socket: ``headers`` (after the request line and Host), then each of ``pieces`` while the
    server has not answered; returns the answer's status (0 when the connection broke before one)."""
    host, port = url.split("//", 1)[1].rstrip("/").split(":")
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        sock.sendall(f"POST /v1/audio/transcriptions HTTP/1.1\r\nHost: {host}:{port}\r\n{headers}\r\n".encode())
        answer = b""
        try:
            for piece in pieces:
                if select.select([sock], [], [], 0)[0]:  # answered: stop sending
                    break
                sock.sendall(piece)
            sock.settimeout(60)
            answer = sock.recv(4096)
        except OSError:
            pass
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/") else 0


def chunked_upload(url: str, total_mib: int) -> int:
    """A multipart upload of ``total_mib`` MiB without a length (chunked transfer encoding)."""
    boundary = "abuseboundary"
    head = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"big.wav\"\r\n"
            "Content-Type: audio/wav\r\n\r\n").encode()
    block = b"\x00" * (1 << 20)

    def pieces():
        for piece in [head] + [block] * total_mib:
            yield f"{len(piece):x}\r\n".encode() + piece + b"\r\n"
        yield b"0\r\n\r\n"
    return raw_post(url, f"Content-Type: multipart/form-data; boundary={boundary}\r\n"
                         "Transfer-Encoding: chunked\r\n", pieces())


def websocket_handshake(url: str, host_header: str) -> int:
    """The status a WebSocket handshake naming ``host_header`` gets (101 when accepted)."""
    host, port = url.split("//", 1)[1].rstrip("/").split(":")
    connection = WSConnection(ConnectionType.CLIENT)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(connection.send(Request(host=host_header, target="/v1/stream")))
        while True:
            data = sock.recv(65536)
            connection.receive_data(data or None)
            for event in connection.events():
                if isinstance(event, AcceptConnection):
                    return 101
                if isinstance(event, RejectConnection):
                    return event.status_code
            if not data:
                return 0


def build_probes(url: str, folder: Path, clip: Path, args: argparse.Namespace) -> list[tuple[str, str, Callable]]:
    """(name, expected answer, a function giving the answer) of every probe."""
    stream_seconds, speed = args.stream_seconds, args.stream_speed
    http = httpx.Client(base_url=url, timeout=600)

    def post_file(name: str, data: bytes) -> Callable[[], str]:
        return lambda: str(http.post("/v1/audio/transcriptions", files={"file": (name, data)}).status_code)

    def respond(**options) -> Callable[[], str]:
        body = json.dumps({"text": "set a timer for five minutes", **options})  # NaN, Infinity as Python writes them
        return lambda: str(http.post("/v1/respond", content=body,
                                     headers={"content-type": "application/json"}).status_code)

    def crowd() -> str:
        with ThreadPoolExecutor(16) as pool:
            replies = list(pool.map(lambda _: http.post("/v1/audio/transcriptions",
                                                        files={"file": (clip.name, clip.read_bytes())}), range(16)))
        busy = [r for r in replies if r.status_code == 503]
        other = [r.status_code for r in replies if r.status_code not in (200, 503)]
        told = all(r.headers.get("retry-after", "").isdigit() for r in busy)
        return f"200 x{len(replies) - len(busy) - len(other)}, 503 x{len(busy)}" + \
            (" with Retry-After" if told else " WITHOUT Retry-After") + (f", other {other}" if other else "")

    speech = load_audio(clip, SAMPLE_RATE)

    def fast_stream() -> str:
        audio = np.resize(speech, int(stream_seconds * SAMPLE_RATE))
        try:
            played = play(url, audio, query="turns=false", piece_s=0.25, realtime=speed > 0, speed=speed or 1.0,
                          timeout_s=600, until=("final",))
        except StreamClientError as e:
            return f"no final ({e})"
        final = played.of_type("final")
        if not final:
            errors = played.of_type("error")
            return f"no final (error: {errors[0][1]['error']})" if errors else "no final"
        message = final[0][1]
        return (f"final ({message['stream']['decodes']} decodes, {len(message['transcript'].split())} words, "
                f"{message['latency_s']['after_end']:.1f} s after the end)")

    def quiet_client() -> str:
        try:
            played = play(url, speech, query="turns=false", piece_s=0.25, realtime=False, timeout_s=120,
                          until=("final",), end=False)
        except StreamClientError as e:
            return f"no final ({e})"
        final = played.of_type("final")
        return "final (idle)" if final and final[0][1].get("ended_by", "").startswith("idle") else "no final"

    target = clip.resolve()
    playlist = f"#EXTM3U\n#EXT-X-TARGETDURATION:30\n#EXTINF:20.0,\n{target}\n#EXT-X-ENDLIST\n".encode()
    concat = f"ffconcat version 1.0\nfile '{target}'\n".encode()
    fast = folder / "fast.flac"
    soundfile.write(fast, np.zeros((5 * 384000, 8), dtype=np.float32), 384000)
    wide = write_blocks(folder / "wide.flac", 300, 48000, 8)
    long_quiet = write_blocks(folder / "long_quiet.flac", 600, 48000, 2)
    high_quiet = write_blocks(folder / "high_quiet.flac", 600, 96000, 1)
    long_speech = write_speech(folder / "long_speech.flac", args.speech_seconds)
    wav = folder / "clip.wav"
    soundfile.write(wav, speech, SAMPLE_RATE)
    flac_half, wav_half = cut_in_half(clip, folder / "half.flac"), cut_in_half(wav, folder / "half.wav")
    return [
        ("HLS playlist naming a server .flac", "400", post_file("clip.m3u8", playlist)),
        ("ffconcat list naming a server file", "400", post_file("list.ffconcat", concat)),
        (f"FLAC 8 ch x 384 kHz, 5 s ({fast.stat().st_size // 1024} kB)", "400",
         post_file(fast.name, fast.read_bytes())),
        (f"FLAC 8 ch x 48 kHz, 300 s ({wide.stat().st_size // 1024} kB)", "413",
         post_file(wide.name, wide.read_bytes())),
        (f"FLAC 2 ch x 48 kHz, 600 s silence ({long_quiet.stat().st_size // 1024} kB, within the limits)", "200",
         post_file(long_quiet.name, long_quiet.read_bytes())),
        (f"FLAC 1 ch x 96 kHz, 600 s silence ({high_quiet.stat().st_size // 1024} kB, within the limits)", "200",
         post_file(high_quiet.name, high_quiet.read_bytes())),
        (f"FLAC 2 ch x 48 kHz, {args.speech_seconds:g} s speech ({long_speech.stat().st_size // 1024} kB, within the "
         "limits)", "200", post_file(long_speech.name, long_speech.read_bytes())),
        ("chunked body of 256 MiB (limit 128)", "413", lambda: str(chunked_upload(url, 256))),
        ("Content-Length of 1 GiB", "413",
         lambda: str(raw_post(url, f"Content-Type: multipart/form-data; boundary=x\r\nContent-Length: {1 << 30}\r\n",
                              [b"\x00" * 1024]))),
        ("num_beams 5000, beam search", "400", respond(strategy="beam", num_beams=5000)),
        ("num_beams 10^23", "400", respond(num_beams=10 ** 23)),
        ("max_new_tokens 10^23", "400", respond(max_new_tokens=10 ** 23)),
        ("temperature nan, sampling", "400", respond(strategy="sample", temperature=float("nan"))),
        ("temperature inf, sampling", "400", respond(strategy="sample", temperature=float("inf"))),
        ("temperature 1e-45, sampling", "400", respond(strategy="sample", temperature=1e-45)),
        ("repetition_penalty inf", "400", respond(repetition_penalty=float("inf"))),
        ("repetition_penalty 1e-300", "400", respond(repetition_penalty=1e-300)),
        ("/v1/respond with 10 MB of text", "400",
         lambda: str(http.post("/v1/respond", json={"text": "set a timer " * 900_000}).status_code)),
        ("NUL byte in the filename", "200", post_file("a\x00b.flac", clip.read_bytes())),
        ("FLAC cut in half", "400", post_file(flac_half.name, flac_half.read_bytes())),
        ("WAV cut in half", "400", post_file(wav_half.name, wav_half.read_bytes())),
        ("Host: attacker.example (DNS rebinding)", "400",
         lambda: str(http.get("/health", headers={"host": "attacker.example:8000"}).status_code)),
        ("WebSocket with Host: attacker.example", "403", lambda: str(websocket_handshake(url, "attacker.example"))),
        ("POST with Origin: http://evil.example", "403",
         lambda: str(http.post("/v1/respond", json={"text": "hi"},
                               headers={"origin": "http://evil.example"}).status_code)),
        ("/docs (Swagger from a CDN)", "404", lambda: str(http.get("/docs").status_code)),
        ("16 requests at once, queue of 8", "200 and 503 with Retry-After", crowd),
        (f"WebSocket: {stream_seconds:g} s of speech "
         + (f"at {speed:g}x real time" if speed else "as fast as it goes"), "final", fast_stream),
        (f"WebSocket: a client that goes quiet", "final (idle)", quiet_client),
    ]


def passed(expected: str, got: str) -> bool:
    if expected == "200 and 503 with Retry-After":
        return "WITHOUT" not in got and "other" not in got
    if expected == "final":
        return got.startswith("final")
    return got == expected


@cli
def main(argv: list[str] | None = None) -> int:
    own, serve_args = split_serve_args(argv)
    args = get_parser().parse_args(own)
    clip = sorted((SAMPLES_DIR / "LibriSpeech" / "test-clean").rglob("*.flac"))[0]
    process = None
    if args.url is None:
        process, url = start_server(["--min-confidence", "0", "--stream-idle-seconds", f"{IDLE_SECONDS:g}",
                                     *serve_args], EXPERIMENTS / "bench" / "serve_abuse_server.log")
    else:
        url = args.url.rstrip("/")
    pid = process.pid if process else None
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="serve-abuse-") as folder:
            probes = build_probes(url, Path(folder), clip, args)
            httpx.post(f"{url}/v1/audio/transcriptions", files={"file": (clip.name, clip.read_bytes())}, timeout=120)
            idle = rss_mb(pid)
            print("| probe | expected | got | ok | server RSS MiB: before -> peak -> after | seconds |\n"
                  "| --- | --- | --- | --- | --- | ---: |", flush=True)
            for name, expected, probe in probes:
                if args.only and args.only not in name:
                    continue
                before, start = rss_mb(pid), time.perf_counter()
                with PeakRss(pid) as peak:
                    try:
                        got = probe()
                    except (httpx.HTTPError, OSError) as e:
                        got = f"{type(e).__name__}: {e}"
                rows.append({"probe": name, "expected": expected, "got": got, "ok": passed(expected, got),
                             "rss_mib": {"before": before, "peak": peak.peak, "after": rss_mb(pid)},
                             "seconds": round(time.perf_counter() - start, 2)})
                print(format_row(rows[-1]), flush=True)
    finally:
        if process is not None:
            stop_server(process)
    write_text_atomic(args.json, json.dumps({"url": url, "serve_args": serve_args, "idle_rss_mib": idle,
                                             "probes": rows}, indent=2) + "\n")
    failed = [r["probe"] for r in rows if not r["ok"]]
    print(f"{len(rows) - len(failed)} of {len(rows)} probes answered as they should; server RSS at rest {idle} MiB; "
          f"written to {args.json}" + (f"; NOT: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


def format_row(row: dict) -> str:
    rss = row["rss_mib"]
    memory = "-" if rss["peak"] is None else \
        f"{rss['before']} -> {rss['peak']} -> {rss['after']} (peak {rss['peak'] - rss['before']:+.0f})"
    return (f"| {row['probe']} | {row['expected']} | {row['got']} | {'yes' if row['ok'] else 'NO'} | {memory} | "
            f"{row['seconds']} |")


if __name__ == "__main__":
    sys.exit(main())
