"""Rows of token ids of different lengths as one right-padded batch: what the SLM's trainer and perplexity, and
the Whisper decoder's rescoring and conversion, feed a causal language model."""

from __future__ import annotations

from typing import Sequence

import torch
from torch.nn.utils.rnn import pad_sequence


def pad_token_rows(rows: Sequence[Sequence[int]], fill: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``rows`` (at least one) as ids [B, T] (long, T the longest row) with ``fill`` after each row's end, and a
    mask [B, T] (bool) that is True on each row's own tokens."""
    ids = pad_sequence([torch.as_tensor(row, dtype=torch.long) for row in rows], batch_first=True,
                       padding_value=fill)
    lengths = torch.tensor([len(row) for row in rows])
    return ids, torch.arange(ids.shape[1])[None, :] < lengths[:, None]
