"""The server's heap setting (duet.serving.heap): large blocks leave the process when freed."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# Run in a fresh interpreter: a test worker that has run other tests holds a heap (and whatever allocator settings
# its libraries made) that would hide both the allocation and the release
CHECK = """
import json, os
import numpy as np
from duet.serving.heap import MMAP_THRESHOLD_BYTES, return_freed_blocks
from duet.serving.local_server import rss_mb

rss = lambda: rss_mb(os.getpid())
if not return_freed_blocks() or rss() is None:
    print(json.dumps(None))
    raise SystemExit
# with glibc's own threshold, freeing a larger mapped block raises it past the blocks below: they would come from the
# heap and, small live allocations between them, stay resident once freed (this check fails that way)
freed = np.ones(8 * MMAP_THRESHOLD_BYTES, dtype=np.uint8)
del freed
before = rss()
blocks, between = [], []
for _ in range(BLOCKS):
    blocks.append(np.ones(2 * MMAP_THRESHOLD_BYTES, dtype=np.uint8))  # touched: resident
    between.append(bytearray(4096))  # kept
held = rss()
del blocks
print(json.dumps({"allocated": held - before, "kept": rss() - before,
                  "expected": BLOCKS * 2 * MMAP_THRESHOLD_BYTES / 2 ** 20}))
"""
BLOCKS = 50  # of twice the threshold each: 100 MiB


def test_freed_blocks_above_the_threshold_leave_the_process():
    done = subprocess.run([sys.executable, "-c", f"BLOCKS = {BLOCKS}\n{CHECK}"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    if figures is None:
        pytest.skip("no glibc mallopt, or no /proc/self/status to read the resident memory from")
    assert figures["allocated"] > 0.8 * figures["expected"], figures
    assert figures["kept"] < 10, f"{figures['allocated']:.0f} MiB allocated, {figures['kept']:.0f} MiB still resident"
