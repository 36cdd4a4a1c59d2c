#!/usr/bin/env python
r"""End of turn on the server's hands-free WebSocket (/v1/stream?turns=true): how soon after the speaker stops the
answer arrives, whether a turn is split or merged, whether room noise makes one, and what the VAD costs.

Usage:
  python bench/turn_latency.py                               # starts tools/serve.py with the demo's models
  python bench/turn_latency.py --conversations 8 --turns 3
  python bench/turn_latency.py -- --asr-model samples/checkpoints/fastconformer_tiny_base.nemo \
      --slm-model experiments/demo_slm                       # options after -- go to tools/serve.py
  python bench/turn_latency.py --url http://127.0.0.1:8000   # a server already running

Each of --conversations recordings holds --turns turns; a turn is a sentence made of two held-out utterances of the
sample (test-clean, each cut to its sound) --inner-pause apart (0.3 s: a pause inside a sentence, which must not end
the turn), turns are --turn-gap apart, and room noise at --noise-dbfs (duet.synth.conversation.room_noise: fan, hum,
key clicks) lies under all of it. Then --noise-seconds of that room noise alone. Each recording is played to the
server in real time in 0.1 s pieces, one session at a time (duet.serving.stream_client: piece k leaves when it would have
been recorded), and every message is timed on arrival.

Figures, printed and written as JSON (--json, default experiments/bench/turn_latency.json):
  end of turn     per turn, from the end of its speech (the last sound of its last utterance, from the clean
                  utterance: duet.synth.conversation.speech_range) to the arrival of its final: median, p90, max;
                  also the VAD's own share (where it decided, in audio time) and the server's after_end
  turns           finals per conversation against turns: split (more), merged or lost (fewer); finals on noise
  VAD cost        the streaming detector (Silero VAD and its decisions) over all the audio here, on one core, in 0.1 s
                  pieces: CPU seconds per second of audio (and wall); and what the server reports in its "done"
                  messages (vad_s / audio_s, CPU time of the threads that ran it)
Targets (issue #35): end of turn <= 0.8 s (median, 2 cores, the demo's models); no split at 0.3 s pauses; no final
on room noise; VAD <= 2 % of real time on one core. The exit code is 1 when a turn is split, merged or lost, or the
noise made a final.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import httpx

from duet import SAMPLES_DIR
from duet.asr.inference import load_audio
from duet.demo.models import DEMO_ASR_MODEL, default_slm_model
from duet.errors import DuetError
from duet.serving.local_server import start_server, stop_server
from duet.data.manifest import build_split_manifest
from duet.serving.stream_client import SAMPLE_RATE, play
from duet.synth.conversation import compose, room_noise
from duet.vad import SileroVad, SpeechDetector, VadSettings
from duet.foundation import EXPERIMENTS, python_command
from duet.foundation.errors import cli
from duet.foundation.files import write_text_atomic


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--conversations", type=int, default=6, help="recordings (default: 6)")
    parser.add_argument("--turns", type=int, default=2, help="turns per recording (default: 2)")
    parser.add_argument("--inner-pause", type=float, default=0.3,
                        help="seconds between the two utterances of a turn (default: 0.3)")
    parser.add_argument("--turn-gap", type=float, default=1.5, help="seconds between turns (default: 1.5)")
    parser.add_argument("--noise-dbfs", type=float, default=-50.0, help="room noise under the speech (default: -50)")
    parser.add_argument("--noise-seconds", type=float, default=10.0, help="room noise alone (default: 10)")
    parser.add_argument("--url", default=None, help="a running server (default: start tools/serve.py)")
    parser.add_argument("--json", type=Path, default=EXPERIMENTS / "bench" / "turn_latency.json",
                        help="where the figures go")
    return parser


def conversations(count: int, turns: int, inner_s: float, gap_s: float, noise_dbfs: float):
    """``count`` recordings of ``turns`` two-utterance turns; each with where its turns' speech ends (samples)."""
    entries = list(build_split_manifest(SAMPLES_DIR / "LibriSpeech" / "test-clean").entries)
    needed = count * turns * 2
    if len(entries) < needed:
        raise DuetError(f"the sample test-clean has {len(entries)} utterances; --conversations x --turns x 2 = {needed}")
    clips = [load_audio(e["audio_filepath"], SAMPLE_RATE) for e in entries[:needed]]
    made = []
    for c in range(count):
        mine = clips[c * turns * 2:(c + 1) * turns * 2]
        gaps = [0.8] + [g for _ in range(turns) for g in (inner_s, gap_s)]
        gaps[-1] = gap_s + 0.5  # room after the last turn for its end to be heard before the recording ends
        talk = compose(mine, gaps, SAMPLE_RATE, noise_dbfs=noise_dbfs, seed=c)
        made.append((talk, [talk.speech[2 * t + 1][1] for t in range(turns)]))
    return made


def quantiles(values: list[float]) -> dict:
    if not values:
        return {"median": None, "p90": None, "max": None, "n": 0}
    ordered = sorted(values)
    return {"median": round(statistics.median(ordered), 3), "p90": round(ordered[int(0.9 * (len(ordered) - 1))], 3),
            "max": round(ordered[-1], 3), "n": len(ordered)}


@cli
def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    serve_args = argv[argv.index("--") + 1:] if "--" in argv else []
    args = get_parser().parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    if args.conversations < 1 or args.turns < 1:
        raise DuetError("--conversations and --turns must be >= 1")
    if args.url is None and "--asr-model" not in serve_args:
        for flag, path in (("--asr-model", DEMO_ASR_MODEL), ("--slm-model", default_slm_model())):
            if not path.exists() and flag not in serve_args:
                raise DuetError(f"{path} not found: run {python_command('tools/demo.py')} first, or give the server's "
                                f"{flag} "
                                "after --")
    talks = conversations(args.conversations, args.turns, args.inner_pause, args.turn_gap, args.noise_dbfs)
    noise = room_noise(args.noise_seconds, SAMPLE_RATE, seed=99, level_dbfs=-35.0)

    # the VAD's cost here, on one core (its own ONNX session, one thread): the streaming detector, model and rules,
    # fed every second the server will hear in 0.1 s pieces; CPU time of this thread, and wall time
    detector, piece = SpeechDetector(VadSettings(), SileroVad()), SAMPLE_RATE // 10
    wall = time.perf_counter()
    for audio in [talk.audio for talk, _ in talks] + [noise]:
        for at in range(0, len(audio), piece):
            detector.feed(audio[at:at + piece])
    vad_wall = time.perf_counter() - wall
    audio_s = detector.samples / SAMPLE_RATE
    vad_cost = detector.windows_seconds / audio_s

    process = None
    if args.url is None:
        # every turn is answered by the language model, however unsure its transcript: the latency measured is the
        # whole path's (a --min-confidence after -- replaces this one)
        process, url = start_server(["--min-confidence", "0", *serve_args],
                                    EXPERIMENTS / "bench" / "turn_latency_server.log")
    else:
        url = args.url.rstrip("/")
    try:
        health = httpx.get(f"{url}/health", timeout=10).json()
        play(url, talks[0][0].audio, realtime=False)  # warm-up: first calls allocate and pick kernels
        latencies, vad_lag, after_end, server_vad, rows = [], [], [], [], []
        for i, (talk, ends) in enumerate(talks):
            played = play(url, talk.audio)
            finals = played.of_type("final")
            speech_ends = {m["turn"]: m for _, m in played.of_type("speech_end")}
            done = played.of_type("done")[-1][1]
            server_vad.append(done["vad_s"] / done["audio_s"])
            row = {"conversation": i, "turns": len(ends), "finals": len(finals), "latency_s": []}
            for (at, final), end in zip(finals, ends):
                spoken_end = played.start + end / SAMPLE_RATE
                row["latency_s"].append(round(at - spoken_end, 3))
                decided = speech_ends.get(final["turn"], {}).get("decided_at_s")
                if decided is not None:
                    vad_lag.append(decided - end / SAMPLE_RATE)
                after_end.append(final["latency_s"]["after_end"])
            latencies += row["latency_s"]
            rows.append(row)
            print(f"conversation {i}: {len(ends)} turns, {len(finals)} finals, end of turn "
                  f"{', '.join(f'{s:.3f}' for s in row['latency_s'])} s", flush=True)
        on_noise = play(url, noise)
        noise_finals = len(on_noise.of_type("final")) + len(on_noise.of_type("speech_start"))
    finally:
        if process is not None:
            stop_server(process)
    wrong = [r for r in rows if r["finals"] != r["turns"]]
    report = {"url": url, "server": {k: health.get(k) for k in ("asr_model", "slm_model", "asr_decoding", "turns")},
              "omp_num_threads": os.environ.get("OMP_NUM_THREADS"), "cores": os.cpu_count(),
              "conversations": args.conversations, "turns_each": args.turns, "inner_pause_s": args.inner_pause,
              "turn_gap_s": args.turn_gap, "noise_dbfs": args.noise_dbfs,
              "end_of_turn_s": quantiles(latencies), "vad_decision_s": quantiles(vad_lag),
              "server_after_end_s": quantiles(after_end), "split_merged_or_lost": len(wrong),
              "noise_seconds": args.noise_seconds, "noise_speech_or_finals": noise_finals,
              "vad_cost_one_core": round(vad_cost, 5), "vad_cost_one_core_wall": round(vad_wall / audio_s, 5),
              "vad_cost_server": round(statistics.median(server_vad), 5),
              "rows": rows, "measured": time.strftime("%Y-%m-%d %H:%M:%S")}
    write_text_atomic(args.json, json.dumps(report, indent=2) + "\n")
    q = report["end_of_turn_s"]
    print(f"end of turn (speech end -> final): median {q['median']} s, p90 {q['p90']} s, max {q['max']} s over "
          f"{q['n']} turns; the VAD decided a median {report['vad_decision_s']['median']} s after the speech ended "
          f"(audio time), the server answered a median {report['server_after_end_s']['median']} s after that")
    print(f"turns: {len(wrong)} of {len(rows)} conversations split, merged or lost a turn ({args.inner_pause:g} s "
          f"pauses inside turns); room noise ({args.noise_seconds:g} s): {noise_finals} speech starts or finals")
    print(f"VAD cost (model and decisions): {100 * vad_cost:.2f} % of real time on one core here (CPU time; wall "
          f"{100 * report['vad_cost_one_core_wall']:.2f} %), {100 * report['vad_cost_server']:.2f} % as the server "
          f"reports it; written to {args.json}")
    return 1 if wrong or noise_finals else 0


if __name__ == "__main__":
    sys.exit(main())
