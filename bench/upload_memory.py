#!/usr/bin/env python
r"""Peak memory of one long transcription by the server's pipeline: what an upload within the limits costs above
idle (issue #55's target: at most 300 MB), measured in this process without a server.

Usage:
  python bench/upload_memory.py                          # 160 s of speech, tools/serve.py's default models
  python bench/upload_memory.py --seconds 600 --asr-batch-size 1
  python bench/upload_memory.py --asr-decoding greedy    # the model and decoding options of tools/serve.py
  python bench/upload_memory.py --glibc-heap             # glibc's own mmap threshold, not the server's

The sample utterances end to end, repeated to --seconds at 16 kHz, go through VoicePipeline.transcribe_segments as
/v1/audio/transcriptions sends them (cut at pauses into pieces of at most 20 s, --asr-batch-size pieces a forward
pass, one decoding worker, no word times, the server's fixed mmap threshold: duet.serving.heap) after one warm-up
utterance; VmRSS is sampled every 50 ms. Printed: idle, peak (its rise over idle, and that rise as a share of the
300 MB target), after, and the seconds (wall and CPU); --json writes them with each piece's transcript (to compare
runs: a change that saves memory must leave them the same).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

from duet import SAMPLES_DIR
from duet.asr.inference import load_audio
from duet.cli.cli_args import add_decoding_options, add_model_arguments, pipeline_settings_from_args
from duet.errors import DuetError
from duet.foundation import EXPERIMENTS
from duet.foundation.errors import cli
from duet.foundation.files import add_log_arguments, library_output_to, log_target, write_text_atomic
from duet.pipeline import VoicePipeline
from duet.serving.heap import return_freed_blocks
from duet.serving.local_server import PeakRss, rss_mb

TARGET_MB = 300  # issue #55: peak RSS per request above idle, for any upload within the limits
MIB_PER_MB = 1e6 / 2 ** 20


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=160.0,
                        help="speech in the one transcription (default: 160, one batch of 8 pieces of 20 s)")
    parser.add_argument("--json", type=Path, default=EXPERIMENTS / "bench" / "upload_memory.json",
                        help="where the figures go")
    parser.add_argument("--glibc-heap", action="store_true",
                        help="leave glibc's rising mmap threshold as it is (the reference: before the server fixed it)")
    add_model_arguments(parser)
    add_decoding_options(parser)
    add_log_arguments(parser, "upload_memory")
    return parser


@cli
def main(argv: list[str] | None = None) -> int:
    args = get_parser().parse_args(argv)
    if args.seconds <= 0:
        raise DuetError("--seconds must be > 0")
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    settings, decoding_line = pipeline_settings_from_args(args)
    batching = dataclasses.replace(settings.batching, workers=1)  # one decoding worker, as tools/serve.py's
    settings = dataclasses.replace(settings, batching=batching)
    print(decoding_line, flush=True)
    # what NeMo and transformers print, loading and decoding, goes to --log (experiments/logs/upload_memory.log)
    with library_output_to(log_target(args)):
        pipeline, _ = VoicePipeline.load(settings)
        heap = "glibc's" if args.glibc_heap else "fixed" if return_freed_blocks() else "glibc's (no mallopt)"
        clips = [load_audio(p, pipeline.sample_rate)
                 for p in sorted((SAMPLES_DIR / "LibriSpeech" / "test-clean").rglob("*.flac"))]
        speech = np.resize(np.concatenate(clips), int(args.seconds * pipeline.sample_rate)).astype(np.float32)
        pipeline.transcribe_segments(clips[0], words=False)  # warm-up: first calls allocate and pick kernels
        idle, start, cpu = rss_mb(os.getpid()), time.perf_counter(), time.process_time()
        with PeakRss(os.getpid()) as peak:
            segments = pipeline.transcribe_segments(speech, words=False)
        seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    rise = peak.peak - idle
    report = {"decoding": decoding_line, "seconds_of_speech": args.seconds, "batch_size": batching.batch_size,
              "pieces": len(segments), "words": sum(len(s.text.split()) for s in segments),
              "rss_mib": {"idle": idle, "peak": peak.peak, "rise": round(rise, 1), "after": rss_mb(os.getpid())},
              "target_share": round(rise / (TARGET_MB * MIB_PER_MB), 2), "transcribe_s": round(seconds, 2),
              "cpu_s": round(cpu, 2), "mmap_threshold": heap,
              "omp_num_threads": os.environ.get("OMP_NUM_THREADS"), "texts": [s.text for s in segments]}
    write_text_atomic(args.json, json.dumps(report, indent=2) + "\n")
    print(f"{args.seconds:g} s of speech, {len(segments)} pieces, batches of {batching.batch_size}: RSS {idle} MiB "
          f"idle -> peak {peak.peak} (+{rise:.0f} MiB, {report['target_share']:.2f}x the {TARGET_MB} MB target) -> "
          f"{report['rss_mib']['after']} after; {seconds:.1f} s ({cpu:.1f} s CPU); {heap} mmap threshold; "
          f"written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
