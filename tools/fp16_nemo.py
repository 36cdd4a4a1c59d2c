#!/usr/bin/env python
"""Write a copy of a .nemo whose weights are stored in float16: half the file, loaded back as float32.

Usage:
  python tools/fp16_nemo.py experiments/whisper_tiny_ctc/whisper_tiny_ctc.nemo samples/checkpoints/whisper_tiny_ctc.nemo

Only the storage changes: NeMo's restore_from copies each float16 tensor into the model's float32 parameters,
so the copy runs exactly like a float32 model whose weights were rounded to float16 once (what that costs in WER
is measured in RESULTS.md). Every other member of the archive (config, tokenizer) is copied as it is. The output
is written under a temporary name and renamed into place when complete.
"""

from __future__ import annotations

import argparse
import io
import sys
import tarfile
from pathlib import Path

import torch

from duet.errors import DuetError
from duet.foundation.errors import cli
from duet.foundation.files import atomic_path

WEIGHTS = "model_weights.ckpt"


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", type=Path, help="the .nemo to copy")
    parser.add_argument("out", type=Path, help="the float16 copy (.nemo)")
    return parser


def half_state_dict(state: dict) -> dict:
    return {k: v.half() if torch.is_tensor(v) and v.is_floating_point() else v for k, v in state.items()}


def write_fp16_copy(model: Path, out: Path) -> tuple[int, int]:
    """Copy ``model`` to ``out`` with float16 weights; returns (bytes before, bytes after)."""
    try:
        with tarfile.open(model) as source, atomic_path(out) as tmp, tarfile.open(tmp, "w") as target:
            found = False
            for member in source.getmembers():
                data = source.extractfile(member).read() if member.isfile() else None
                if member.isfile() and Path(member.name).name == WEIGHTS:
                    state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
                    buffer = io.BytesIO()
                    torch.save(half_state_dict(state), buffer)
                    data, found = buffer.getvalue(), True
                if data is not None:
                    member.size = len(data)
                    target.addfile(member, io.BytesIO(data))
                else:
                    target.addfile(member)
            if not found:
                raise DuetError(f"{model}: no {WEIGHTS} inside: not a .nemo checkpoint")
    except (tarfile.TarError, OSError) as e:
        raise DuetError(f"{model}: cannot read it as a .nemo archive ({e})") from None
    return model.stat().st_size, out.stat().st_size


@cli
def main(argv: list[str] | None = None) -> int:
    args = get_parser().parse_args(argv)
    if not args.model.is_file():
        raise DuetError(f"model not found: {args.model}")
    if args.out.suffix != ".nemo" or args.out.resolve() == args.model.resolve():
        raise DuetError(f"out must be another .nemo path, got {args.out}")
    before, after = write_fp16_copy(args.model, args.out)
    print(f"fp16_nemo: {before / 1e6:.1f} MB -> {after / 1e6:.1f} MB: {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
