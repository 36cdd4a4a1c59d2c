#!/usr/bin/env python
r"""Load test of tools/serve.py: N concurrent clients post one clip for T seconds, then it stops by itself.

Usage:
  python bench/serve_load.py --clients 4 --seconds 30           # starts tools/serve.py (the demo's models)
  python bench/serve_load.py --clients 8 --seconds 60 --endpoint transcriptions
  python bench/serve_load.py --clients 8 16 --seconds 60    # 8 clients, then 16, back to back on one server
  python bench/serve_load.py --url http://127.0.0.1:8000 --clients 4 --seconds 30   # a server already running
  python bench/serve_load.py --clients 4 --seconds 30 --stream-seconds 20   # then one 20 s WebSocket stream
  python bench/serve_load.py --clients 4 --seconds 60 --turn-sessions 16   # and 16 hands-free sessions beside them
  # options after -- go to tools/serve.py (models, decoding, --queue-size ...):
  python bench/serve_load.py --clients 4 --seconds 30 -- --asr-model my.nemo --slm-model my_gpt2/

Without --url the server is started on a free 127.0.0.1 port (OMP_NUM_THREADS as this process has it) and
stopped at the end. Each client is a thread with its own HTTP connection that posts --audio (default: a
held-out sample utterance) to /v1/pipeline (or /v1/audio/transcriptions) again and again until --seconds
have passed, after one warm-up request; requests already sent then finish. Several --clients counts run one after
another on the same server (so that 8 and 16 clients are compared under the same machine load). Printed and written
as JSON (--json, default experiments/bench/serve_load.json), for each load: requests/s, p50/p95/max latency (a
request's back-offs included: a 503 with Retry-After, a full queue, is waited out, with jitter, and counted apart),
failures (other non-200 answers or errors: the exit code is 1 if there are any), and the share of the wall time
the server's inference thread spent on model calls (/health's busy_s: at 100 % no client's back-off left it idle);
and the server's resident memory (VmRSS) after the models loaded, after the warm-up, sampled every second across all
the loads (first, peak, last) and after them.

--stream-seconds S then sends the clip, repeated to S seconds, over the WebSocket (/v1/stream) in 0.25 s
messages as fast as the server takes them, alone on the server, and reports what the final message says
of the re-decoding: how many decodes, the median and the last (largest) decode time, and the time from
the end of the audio to the final transcript and answer.

--turn-sessions N runs N hands-free WebSocket sessions (/v1/stream?turns=true) beside the HTTP clients for the
same --seconds: each thread plays a two-turn conversation (two held-out sample utterances 1.5 s apart, faint room
noise under them; duet.serving.stream_client) in real time, checks that exactly two finals came back, numbered 1 and
2, and starts the next session until the time is up (at most --max-sessions-each per thread). A session that errs,
loses, splits or merges a turn is a failure (only loopback addresses are used; every loop is bounded by --seconds and
the per-request timeouts).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import statistics
import sys
import threading
import time
from pathlib import Path

import httpx
import librosa
import soundfile

import numpy as np
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, BytesMessage, CloseConnection, RejectConnection, Request, TextMessage

from duet import SAMPLES_DIR
from duet.asr.inference import load_audio
from duet.errors import DuetError
from duet.serving.local_server import add_bench_arguments, rss_mb, split_serve_args, start_server, stop_server
from duet.data.manifest import build_split_manifest
from duet.serving.stream_client import SAMPLE_RATE, StreamClientError, play
from duet.synth.conversation import compose
from duet.foundation import EXPERIMENTS, REPO_ROOT
from duet.foundation.errors import cli
from duet.foundation.files import write_text_atomic

DEFAULT_AUDIO = REPO_ROOT / "samples" / "LibriSpeech" / "test-clean" / "7001" / "700101" / "7001-700101-0000.flac"
ENDPOINTS = {"pipeline": "/v1/pipeline", "transcriptions": "/v1/audio/transcriptions"}


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, nargs="+", default=[4],
                        help="concurrent clients; several counts run one after another on the same server "
                             "(default: 4)")
    parser.add_argument("--seconds", type=float, default=30.0, help="how long the load lasts (default: 30)")
    parser.add_argument("--endpoint", choices=ENDPOINTS, default="pipeline", help="what each request asks for")
    parser.add_argument("--audio", type=Path, default=DEFAULT_AUDIO, help="the clip every request posts")
    parser.add_argument("--stream-seconds", type=float, default=0.0,
                        help="after the load, one WebSocket stream of this many seconds (default: 0, none)")
    parser.add_argument("--turn-sessions", type=int, default=0,
                        help="hands-free WebSocket sessions running beside the HTTP clients (default: 0)")
    parser.add_argument("--max-sessions-each", type=int, default=50,
                        help="at most this many sessions one --turn-sessions thread runs (default: 50)")
    add_bench_arguments(parser, "serve_load")
    return parser


def two_turn_conversations(count: int) -> list[np.ndarray]:
    """``count`` recordings of two turns (two held-out sample utterances 1.5 s apart, faint room noise under them)."""
    entries = list(build_split_manifest(SAMPLES_DIR / "LibriSpeech" / "test-clean").entries)
    clips = [load_audio(e["audio_filepath"], SAMPLE_RATE) for e in entries]
    return [compose([clips[(2 * i) % len(clips)], clips[(2 * i + 1) % len(clips)]], [0.6, 1.5, 1.2], SAMPLE_RATE,
                    noise_dbfs=-55.0, seed=i).audio for i in range(count)]


def run_turn_sessions(url: str, conversations: list[np.ndarray], deadline: float, max_each: int) -> dict:
    """One thread per conversation, each playing it in hands-free sessions until ``deadline``; a session passes
    when it gets finals 1 and 2 and "done" with turns 2, and no error."""
    passed, failures, end_of_turn = [], [], []
    lock = threading.Lock()

    def session_thread(audio: np.ndarray) -> None:
        for _ in range(max_each):
            if time.monotonic() >= deadline:
                return
            try:
                played = play(url, audio, timeout_s=120)
                turns = [m["turn"] for _, m in played.of_type("final")]
                errors = [m.get("error") for _, m in played.of_type("error")]
                done = played.of_type("done")
                problem = (f"errors {errors}" if errors else None) or \
                          (None if turns == [1, 2] and done and done[-1][1]["turns"] == 2 else f"finals {turns}")
            except (StreamClientError, OSError) as e:
                problem = f"{type(e).__name__}: {e}"
            with lock:
                if problem:
                    failures.append(problem)
                else:
                    passed.append(1)
                    end_of_turn.extend(m["latency_s"]["after_end"] for _, m in played.of_type("final"))

    threads = [threading.Thread(target=session_thread, args=(audio,)) for audio in conversations]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ordered = sorted(end_of_turn)
    return {"sessions": len(passed), "failures": len(failures), "failure_examples": failures[:5],
            "after_end_s": {"p50": round(ordered[len(ordered) // 2], 4) if ordered else None,
                            "max": round(ordered[-1], 4) if ordered else None}}


def run_load(url: str, endpoint: str, audio: bytes, name: str, clients: int, seconds: float) -> dict:
    """Each client posts until ``seconds`` have passed; a 503 with ``Retry-After`` (the server's queue is full) is
    not a failure: the client waits that long, times a random 0.5-1.5 so that the refused do not come back
    together, and asks again, the wait counted in that request's latency."""
    latencies: list[float] = []
    failures: list[str] = []
    busy = [0]  # 503 answers backed off from
    lock = threading.Lock()
    deadline = time.monotonic() + seconds

    def client(seed: int) -> None:
        jitter = random.Random(seed)
        with httpx.Client(base_url=url, timeout=120) as http:
            start = time.perf_counter()
            while time.monotonic() < deadline:
                try:
                    reply = http.post(endpoint, files={"file": (name, audio)})
                    retry = reply.headers.get("retry-after", "") if reply.status_code == 503 else ""
                    if retry.isdigit():
                        with lock:
                            busy[0] += 1
                        time.sleep(max(0.0, min(int(retry) * jitter.uniform(0.5, 1.5), deadline - time.monotonic())))
                        continue
                    problem = None if reply.status_code == 200 else f"HTTP {reply.status_code}: {reply.text[:200]}"
                except httpx.HTTPError as e:
                    problem = f"{type(e).__name__}: {e}"
                with lock:
                    (failures.append(problem) if problem else latencies.append(time.perf_counter() - start))
                start = time.perf_counter()

    threads = [threading.Thread(target=client, args=(seed,)) for seed in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    ordered = sorted(latencies)

    def quantile(q: float) -> float | None:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 4) if ordered else None
    return {"requests": len(latencies), "failures": len(failures), "failure_examples": failures[:5],
            "busy_503_backed_off": busy[0],
            "wall_s": round(wall, 2), "requests_per_s": round(len(latencies) / wall, 2),
            "latency_s": {"p50": quantile(0.5), "p95": quantile(0.95), "max": quantile(1.0),
                          "mean": round(statistics.fmean(ordered), 4) if ordered else None}}


def stream_once(url: str, audio_path: Path, seconds: float) -> dict:
    """One WebSocket session: ``audio_path`` (16 kHz mono PCM16, repeated to ``seconds``) in 0.25 s messages,
    then ``{"type": "end"}``; returns the final message without its text fields, plus the wall time."""
    audio, rate = soundfile.read(str(audio_path), dtype="float32", always_2d=True)
    audio = librosa.resample(audio.mean(axis=1), orig_sr=rate, target_sr=16000) if rate != 16000 else audio.mean(axis=1)
    audio = np.resize(audio, int(seconds * 16000))
    pcm = (np.clip(audio, -1, 1) * 32767).astype("<i2").tobytes()
    host, port = url.split("//", 1)[1].split(":")
    connection = WSConnection(ConnectionType.CLIENT)
    with socket.create_connection((host, int(port)), timeout=300) as sock:
        sock.sendall(connection.send(Request(host=f"{host}:{port}", target="/v1/stream")))
        text, final, accepted = "", None, False
        start = time.perf_counter()

        def read_events() -> None:
            nonlocal text, final, accepted
            connection.receive_data(sock.recv(65536) or None)
            for event in connection.events():
                if isinstance(event, AcceptConnection):
                    accepted = True
                elif isinstance(event, RejectConnection):
                    raise DuetError("/v1/stream refused the WebSocket")
                elif isinstance(event, TextMessage):
                    text += event.data
                    if event.message_finished:
                        message, text = json.loads(text), ""
                        if message["type"] in ("final", "error"):
                            final = message
                elif isinstance(event, CloseConnection) and final is None:
                    raise DuetError("/v1/stream closed without a final message")
        while not accepted:
            read_events()
        for at in range(0, len(pcm), 8000):  # 0.25 s of 16-bit samples
            sock.sendall(connection.send(BytesMessage(data=pcm[at:at + 8000])))
        ended = time.perf_counter()
        sock.sendall(connection.send(TextMessage(data=json.dumps({"type": "end"}))))
        while final is None:
            read_events()
    if final["type"] == "error":
        raise DuetError(f"/v1/stream: {final['error']}")
    return {"audio_s": seconds, "send_s": round(ended - start, 3), "wall_s": round(time.perf_counter() - start, 3),
            "transcript_words": len(final["transcript"].split()), "latency_s": final["latency_s"], **final["stream"]}


@cli
def main(argv: list[str] | None = None) -> int:
    own, serve_args = split_serve_args(argv)
    args = get_parser().parse_args(own)
    if min(args.clients) < 1 or args.seconds <= 0:
        raise DuetError("--clients must be >= 1 and --seconds > 0")
    if not args.audio.is_file():
        raise DuetError(f"--audio {args.audio} does not exist")
    if args.turn_sessions < 0 or args.max_sessions_each < 1:
        raise DuetError("--turn-sessions must be >= 0 and --max-sessions-each >= 1")
    audio = args.audio.read_bytes()
    conversations = two_turn_conversations(args.turn_sessions)
    (EXPERIMENTS / "bench").mkdir(parents=True, exist_ok=True)
    process = None
    if args.url is None:
        # the whole path is measured: the language model answers every request, however unsure the transcript (a
        # flagged clip would skip it and inflate requests/s); a --min-confidence after -- replaces this one
        process, url = start_server(["--min-confidence", "0", *serve_args],
                                    EXPERIMENTS / "bench" / "serve_load_server.log")
    else:
        url = args.url.rstrip("/")
    pid = process.pid if process else None
    try:
        health = httpx.get(f"{url}/health", timeout=10).json()
        memory = {"models_loaded": rss_mb(pid)}
        endpoint = ENDPOINTS[args.endpoint]
        warm = httpx.post(f"{url}{endpoint}", files={"file": (args.audio.name, audio)}, timeout=120)
        if warm.status_code != 200:
            raise DuetError(f"the warm-up request failed: HTTP {warm.status_code} {warm.text[:300]}")
        if conversations:  # and one hands-free session, so that the VAD and the turn code are warm too
            play(url, conversations[0], realtime=False, timeout_s=120)
        memory["after_warm_up"] = rss_mb(pid)
        samples, sampling = [], threading.Event()

        def sample_memory() -> None:
            while not sampling.wait(1.0):
                samples.append(rss_mb(pid))
        sampler = threading.Thread(target=sample_memory, daemon=True)
        sampler.start()
        loads = [load_with_turns(url, endpoint, audio, args, clients, conversations) for clients in args.clients]
        sampling.set()
        memory["after_load"] = rss_mb(pid)
        during = [m for m in samples if m is not None]
        memory["during_load"] = {"first": during[0], "peak": max(during), "last": during[-1],
                                 "samples_1s": during} if during else None
        stream = stream_once(url, args.audio, args.stream_seconds) if args.stream_seconds > 0 else None
    finally:
        if process is not None:
            stop_server(process)
    report = {"url": url, "endpoint": endpoint, "clients": args.clients, "seconds": args.seconds,
              "audio": str(args.audio), "audio_s": round(soundfile.info(str(args.audio)).duration, 3),
              "server": {k: health.get(k) for k in
              ("asr_model", "slm_model", "asr_decoding")}, "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
              "server_rss_mib": memory, "warm_up_answer": warm.json(), "loads": loads, "stream": stream}
    write_text_atomic(args.json, json.dumps(report, indent=2) + "\n")
    for result in loads:
        lat, turns_result = result["latency_s"], result["turn_sessions"]
        print(f"{result['clients']} clients x {args.seconds:g} s on {endpoint}: {result['requests']} requests "
              f"({result['requests_per_s']:.2f}/s), p50 {lat['p50']} s, p95 {lat['p95']} s, max {lat['max']} s, "
              f"{result['failures']} failures, {result['busy_503_backed_off']} busy answers backed off; inference "
              f"thread busy {result['worker_busy_share']:.0%} of the time, {result['worker_s_per_request']} s a "
              "request")
        if turns_result:
            print(f"  {args.turn_sessions} hands-free session threads beside them: {turns_result['sessions']} "
                  f"two-turn sessions passed, {turns_result['failures']} failed; answers "
                  f"{turns_result['after_end_s']['p50']} s (median) after each turn's end was decided")
    during = memory["during_load"] or {}
    print(f"server RSS {memory['models_loaded']} -> {memory['after_warm_up']} MiB (loaded, warm); during the load "
          f"{during.get('first')} -> peak {during.get('peak')} -> {during.get('last')} MiB (first, peak, last of "
          f"{len(during.get('samples_1s', []))} one-second samples); after {memory['after_load']} MiB; written to "
          f"{args.json}")
    if stream:
        print(f"stream of {stream['audio_s']:g} s: {stream['decodes']} decodes, median {stream['decode_s_median']} s, "
              f"last {stream['decode_s_last']} s; final transcript and answer {stream['latency_s']['after_end']} s "
              f"after the end of the audio (wall {stream['wall_s']} s)")
    return 1 if any(r["failures"] or (r["turn_sessions"] or {}).get("failures") for r in loads) else 0


def load_with_turns(url: str, endpoint: str, audio: bytes, args: argparse.Namespace, clients: int,
                    conversations: list[np.ndarray]) -> dict:
    """One load of ``clients`` HTTP clients for ``args.seconds``, with the hands-free sessions beside it, and how
    busy it kept the server's inference thread: its share of the wall time on model calls (1.0: never idle, so any
    change in requests/s is the calls' own speed) and its seconds per request."""
    busy_before = worker_busy_s(url)
    turns_result, turns_thread = None, None
    if conversations:
        deadline = time.monotonic() + args.seconds

        def turns_runner() -> None:
            nonlocal turns_result
            turns_result = run_turn_sessions(url, conversations, deadline, args.max_sessions_each)
        turns_thread = threading.Thread(target=turns_runner)
        turns_thread.start()
    result = run_load(url, endpoint, audio, args.audio.name, clients, args.seconds)
    if turns_thread is not None:
        turns_thread.join()
    busy = worker_busy_s(url) - busy_before
    return {"clients": clients, **result, "worker_busy_share": round(busy / result["wall_s"], 3),
            "worker_s_per_request": round(busy / result["requests"], 3) if result["requests"] else None,
            "turn_sessions": turns_result}


def worker_busy_s(url: str) -> float:
    """The server's inference thread's time on model calls since it started (/health)."""
    return httpx.get(f"{url}/health", timeout=30).json()["queue"]["busy_s"]


if __name__ == "__main__":
    sys.exit(main())
