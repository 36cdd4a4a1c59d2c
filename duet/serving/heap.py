"""The server process's heap: large blocks go back to the system as soon as they are freed (glibc's ``mallopt``), so
that a long upload's transcription costs what its largest stage needs, not what its stages left behind.

glibc maps a block of at least its mmap threshold on its own and unmaps it when freed; smaller blocks come from the
heap, whose freed space stays resident for reuse. The threshold starts at 128 KiB and rises (up to 32 MiB) to the
size of each mapped block freed, so after a few requests nearly every block of a transcription comes from the heap:
each stage of a piece's decoding (the encoder's activations, CTranslate2's beam search, Whisper's rescoring) leaves
freed space that the next stage, asking for other sizes, cannot always reuse, and the heap grows past any one
stage's need. Fixing the threshold turns that rise off (``mallopt`` with ``M_MMAP_THRESHOLD``; also what the
``MALLOC_MMAP_THRESHOLD_`` environment variable does at start-up). bench/upload_memory.py measures it.
"""

from __future__ import annotations

import ctypes
import ctypes.util

M_MMAP_THRESHOLD = -3  # glibc's malloc.h
# Blocks from this size up are mapped on their own and unmapped when freed (glibc's starting threshold is 128 KiB).
# Each block above it costs page faults afresh: 256 KiB saved a little more memory but took 23 % more CPU time for
# 160 s of speech, 1 MiB about 7 % (RESULTS.md, #serve-targets, has the peaks)
MMAP_THRESHOLD_BYTES = 1 << 20


def return_freed_blocks(threshold: int = MMAP_THRESHOLD_BYTES) -> bool:
    """Fix this process's mmap threshold at ``threshold`` bytes: freed blocks of that size or more leave the
    process at once. False where the C library is not glibc (no ``mallopt``: musl, macOS) or refuses the value."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name)
    except OSError:
        return False
    mallopt = getattr(libc, "mallopt", None)
    if mallopt is None:
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return mallopt(M_MMAP_THRESHOLD, threshold) == 1
