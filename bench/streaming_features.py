#!/usr/bin/env python
r"""Cost of incremental streaming features: per-chunk compute of a StreamingSession vs the whole-file features
the streaming path used to compute before its first chunk.

Usage:
  python bench/streaming_features.py                    # bundled checkpoint converted to streaming, 5 test-clean files
  python bench/streaming_features.py --model streaming.nemo --files 10 --threads 1

The model is a cache-aware ``.nemo``, or by default ``samples/checkpoints/fastconformer_tiny_base.nemo``
converted with duet.asr.streaming.convert_to_streaming (3.3 M, per_feature: running statistics; its
accuracy is not the point, compute does not depend on the weights). Each file is fed to a session in 100 ms
pieces, as a live source delivers them. The table gives per file: the whole-file log-mel features (what the
old path computed up front, before the first chunk could be decoded), the incremental features +
normalisation of each chunk, and each chunk's whole compute (features, normalisation, encoder step,
decoding) as ``Partial.compute_seconds`` records it; medians over the chunks, max in brackets.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from duet.asr.inference import load_asr_model, load_audio
from duet.asr.streaming import (
    IncrementalFeatures,
    RunningFeatureNormalization,
    convert_to_streaming,
    stream_transcribe,
    streaming_latency,
)
from duet.errors import DuetError
from duet.foundation import REPO_ROOT
from duet.foundation.errors import cli

BUNDLED = REPO_ROOT / "samples" / "checkpoints" / "fastconformer_tiny_base.nemo"
TEST_CLEAN = REPO_ROOT / "samples" / "LibriSpeech" / "test-clean"


def chunk_feature_ms(model, audio) -> list[float]:
    """Milliseconds of incremental features (+ running normalisation) for each chunk a session decodes."""
    features = IncrementalFeatures(model, keep_normalization=model.cfg.preprocessor.normalize != "per_feature")
    normalize = RunningFeatureNormalization(int(model.cfg.preprocessor.features))
    features.add(audio)
    first, later = model.encoder.streaming_cfg.chunk_size
    times, end = [], first
    while True:
        final = end > features.frames_ready()
        end = features.total_frames() if final else end
        tic = time.perf_counter()
        normalize(features.compute(end, final=final))
        times.append(1000 * (time.perf_counter() - tic))
        if final:
            return times
        end += later


@cli
def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, default=None, help="cache-aware .nemo (default: bundled, converted)")
    parser.add_argument("--files", type=int, default=5, help="test-clean files of the bundled sample")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: a shared CPU's fair figure)")
    args = parser.parse_args(argv)
    files = sorted(TEST_CLEAN.rglob("*.flac"))[: args.files]
    if not files:
        raise DuetError(f"no .flac under {TEST_CLEAN}")
    torch.set_num_threads(args.threads)
    if args.model is None:
        with tempfile.TemporaryDirectory() as tmp:
            model, _ = convert_to_streaming(BUNDLED, Path(tmp) / "streaming.nemo")
        name = f"{BUNDLED.name} converted to streaming"
    else:
        model, name = load_asr_model(args.model), args.model.name
    latency = streaming_latency(model)
    print(f"model: {name}, normalize={model.cfg.preprocessor.normalize}, {latency.describe()}, "
          f"torch threads {args.threads}")
    print("| file | audio s | chunks | whole-file features ms (old, up front) | features+norm per chunk ms (new) "
          "| compute per chunk ms (new, all) |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for path in files:
        audio = load_audio(path, 16000)
        with torch.inference_mode():
            tic = time.perf_counter()
            model.preprocessor(input_signal=torch.from_numpy(audio)[None], length=torch.tensor([len(audio)]))
            whole_ms = 1000 * (time.perf_counter() - tic)
        feature_ms = chunk_feature_ms(model, audio)
        partials = list(stream_transcribe(model, audio))
        compute_ms = [1000 * p.compute_seconds for p in partials]
        print(f"| {path.name} | {len(audio) / 16000:.2f} | {len(partials)} | {whole_ms:.1f} | "
              f"{statistics.median(feature_ms):.1f} ({max(feature_ms):.1f}) | "
              f"{statistics.median(compute_ms):.1f} ({max(compute_ms):.1f}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
