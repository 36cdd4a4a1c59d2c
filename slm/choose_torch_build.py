#!/usr/bin/env python
"""Print the pip arguments of the torch build that runs on this machine's NVIDIA driver and GPUs.

Usage:
    python -m slm.choose_torch_build     # e.g. torch==2.13.0 (what tools/setup.sh runs, from the repository
                                         # root, before duet is installed)
    python slm/choose_torch_build.py     # the same, once the setup has installed duet

The choice and why goes to stderr in one line; stdout holds only the pip arguments. Without an ``nvidia-smi``
that answers (a CPU machine) it is plain ``torch==2.13.0``; a GPU with a CUDA 13 driver gets PyPI's CUDA 13.0
build, a V100 or a CUDA 12 driver the CUDA 12.6 build from PyTorch's own index; a machine no build fits stops
with one line saying what to upgrade (exit 2). The rules are in slm/torch_build.py.
"""

from __future__ import annotations

import argparse
import sys

from duet.foundation.errors import cli
from slm.torch_build import machine_torch_build


def get_parser() -> argparse.ArgumentParser:
    return argparse.ArgumentParser(prog="python -m slm.choose_torch_build", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)


@cli
def main(argv: list[str] | None = None) -> int:
    get_parser().parse_args(argv)
    build = machine_torch_build()
    print(f"choose_torch_build: {build.reason}", file=sys.stderr)
    print(" ".join(build.pip_args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
