"""The server's heap setting (duet.serving.heap): large blocks leave the process when freed."""

from __future__ import annotations

import os

import numpy as np
import pytest

from duet.serving.heap import MMAP_THRESHOLD_BYTES, return_freed_blocks
from duet.serving.local_server import rss_mb

BLOCKS = 50  # of twice the threshold each: 100 MiB


def test_freed_blocks_above_the_threshold_leave_the_process():
    if not return_freed_blocks():
        pytest.skip("the C library has no mallopt (not glibc)")
    rss = lambda: rss_mb(os.getpid())  # noqa: E731
    if rss() is None:
        pytest.skip("no /proc/self/status to read the resident memory from")
    # with glibc's own threshold, freeing a larger mapped block raises it past the blocks below: they would come from
    # the heap and, small live allocations between them, stay resident once freed (this test fails that way)
    freed = np.ones(8 * MMAP_THRESHOLD_BYTES, dtype=np.uint8)
    del freed
    before = rss()
    blocks, between = [], []
    for _ in range(BLOCKS):
        blocks.append(np.ones(2 * MMAP_THRESHOLD_BYTES, dtype=np.uint8))  # touched: resident
        between.append(bytearray(4096))  # kept
    held = rss()
    del blocks
    after = rss()
    assert held - before > 0.8 * BLOCKS * 2 * MMAP_THRESHOLD_BYTES / 2 ** 20
    assert after - before < 10, f"{held - before:.0f} MiB allocated, {after - before:.0f} MiB still resident"
