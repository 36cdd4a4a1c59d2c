"""File helpers (atomic writes, JSON Lines, native output to a log), defined in ``slm.files`` so that both
packages share them without ``slm`` importing ``duet``."""

from slm.files import (atomic_path, native_output_to, numbered_jsonl, read_jsonl, save_png_atomic,
                       write_jsonl_atomic, write_text_atomic)

__all__ = ["atomic_path", "native_output_to", "numbered_jsonl", "read_jsonl", "save_png_atomic", "write_jsonl_atomic",
           "write_text_atomic"]
