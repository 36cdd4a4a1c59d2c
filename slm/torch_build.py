"""Which torch build fits this machine's NVIDIA driver and GPUs, as ``nvidia-smi`` reports them.

tools/setup.sh installs torch with what ``python -m slm.choose_torch_build`` (the command over this module)
prints, before anything else (so that pip never picks a build while resolving NeMo's own ``torch>=2.6``); the
recipes call :func:`require_torch_to_see_the_gpus` so that a GPU machine with a torch that cannot use its GPUs
stops with one line instead of training on the CPU.

torch 2.13.0 comes in these builds (PyTorch's CUDA support matrix for 2.12-2.14):

* PyPI's ``torch==2.13.0`` on Linux x86-64: CUDA 13.0, kernels for compute capability 7.5 (Turing) to 12.0
  (Blackwell); a CUDA 13 driver (580.65.06 or later) is needed, or ``torch.cuda.is_available()`` is False.
* ``torch==2.13.0+cu126`` from PyTorch's own index (``TORCH_CU126_INDEX``): CUDA 12.6, capability 5.0 (Maxwell)
  to 9.0 (Hopper), V100 (7.0) included; any CUDA 12 driver (525.60.13 or later: CUDA's minor-version
  compatibility) runs it.

Without an ``nvidia-smi`` that answers (no NVIDIA driver: a CPU machine) the choice is plain ``torch==2.13.0``,
which this workplace's pip serves as a CPU build from its local wheel mirror. A machine no build fits (a driver
older than CUDA 12, a GPU older than Maxwell, a Blackwell GPU on a CUDA 12 driver, or a mix that no single build
covers) is refused with one line saying what to upgrade. This module uses the standard library and
``duet.foundation`` (itself standard library only) alone: the setup runs it before anything is installed, and
``slm`` (the lower package) shares it with ``duet``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections import Counter
from dataclasses import dataclass

from slm.errors import SlmError

TORCH_VERSION = "2.13.0"
TORCH_CU126_INDEX = "https://download.pytorch.org/whl/cu126"

# (capability range, the driver's CUDA version it needs) of each build named in the module docstring
# (machine code for X.Y runs on every X.Z with Z >= Y: the sm_120 kernels serve 12.1, e.g. GB10, too)
PYPI_CUDA13 = {"capabilities": ((7, 5), (12, 9)), "driver_cuda": (13, 0), "driver": "580.65.06"}
CU126 = {"capabilities": ((5, 0), (9, 0)), "driver_cuda": (12, 0), "driver": "525.60.13"}


class NoTorchBuild(SlmError):
    """No torch build runs on this machine's driver and GPUs; the message says what to upgrade."""


@dataclass(frozen=True)
class Gpu:
    name: str
    capability: tuple[int, int] | None  # None: the driver is too old to report it

    def __str__(self) -> str:
        return self.name if self.capability is None else f"{self.name} (compute {self.capability[0]}.{self.capability[1]})"


@dataclass(frozen=True)
class TorchBuild:
    pip_args: list[str]
    reason: str


def describe(gpus: list[Gpu]) -> str:
    """``4 x Tesla V100-SXM2-16GB (compute 7.0)``; different GPUs separated by commas, in nvidia-smi's order."""
    counts = Counter(str(gpu) for gpu in gpus)
    return ", ".join(name if n == 1 else f"{n} x {name}" for name, n in counts.items())


def nvidia_smi(*args: str) -> str | None:
    """``nvidia-smi``'s output, or None where it is missing or fails (no driver loaded, no GPU)."""
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        done = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def driver_cuda_version() -> tuple[int, int] | None:
    """The newest CUDA the driver runs, from the ``CUDA Version: 12.2`` in ``nvidia-smi``'s header."""
    header = nvidia_smi()
    found = re.search(r"CUDA Version:\s*(\d+)\.(\d+)", header or "")
    return (int(found[1]), int(found[2])) if found else None


def listed_gpus() -> list[Gpu]:
    """The GPUs ``nvidia-smi`` lists, with their compute capability where the driver can report it (older drivers
    do not know the ``compute_cap`` field: their GPUs come from ``nvidia-smi -L``, capability unknown)."""
    table = nvidia_smi("--query-gpu=name,compute_cap", "--format=csv,noheader")
    if table is None:
        listing = nvidia_smi("-L") or ""  # "GPU 0: Tesla K80 (UUID: GPU-...)"
        return [Gpu(found[1], None) for found in re.finditer(r"^GPU \d+: (.+?) \(UUID", listing, re.MULTILINE)]
    gpus = []
    for line in table.splitlines():
        name, _, capability = line.rpartition(",")
        major, _, minor = capability.strip().partition(".")
        if name.strip() and major.isdigit() and minor.isdigit():
            gpus.append(Gpu(name.strip(), (int(major), int(minor))))
    return gpus


def _fits(build: dict, gpus: list[Gpu], driver_cuda: tuple[int, int]) -> bool:
    low, high = build["capabilities"]
    return driver_cuda >= build["driver_cuda"] and all(low <= gpu.capability <= high for gpu in gpus)


def choose_torch_build(gpus: list[Gpu], driver_cuda: tuple[int, int] | None) -> TorchBuild:
    """The pip arguments for the torch build that runs on ``gpus`` under a driver running ``driver_cuda``."""
    if not gpus:
        return TorchBuild([f"torch=={TORCH_VERSION}"], "no NVIDIA GPU answers nvidia-smi: the CPU build")
    listed = describe(gpus)
    driver = "an unknown version" if driver_cuda is None else f"{driver_cuda[0]}.{driver_cuda[1]}"
    if driver_cuda is None or driver_cuda < CU126["driver_cuda"] or any(gpu.capability is None for gpu in gpus):
        raise NoTorchBuild(f"no torch {TORCH_VERSION} build runs here: the NVIDIA driver runs CUDA {driver} ({listed}); "
                           f"torch {TORCH_VERSION} needs CUDA 12: install NVIDIA driver {CU126['driver']} or later "
                           f"({PYPI_CUDA13['driver']} or later for the CUDA 13.0 build)")
    if _fits(PYPI_CUDA13, gpus, driver_cuda):
        return TorchBuild([f"torch=={TORCH_VERSION}"], f"{listed}, driver CUDA {driver}: PyPI's CUDA 13.0 build")
    if _fits(CU126, gpus, driver_cuda):
        return TorchBuild([f"torch=={TORCH_VERSION}+cu126", "--extra-index-url", TORCH_CU126_INDEX],
                          f"{listed}, driver CUDA {driver}: the CUDA 12.6 build (PyPI's CUDA 13.0 build needs "
                          f"compute 7.5 or newer and driver {PYPI_CUDA13['driver']} or later)")
    oldest = min(gpus, key=lambda gpu: gpu.capability)
    newest = max(gpus, key=lambda gpu: gpu.capability)
    if oldest.capability < CU126["capabilities"][0]:
        why = f"{oldest} is older than any torch {TORCH_VERSION} build supports (compute 5.0)"
    elif newest.capability > CU126["capabilities"][1] and oldest.capability < PYPI_CUDA13["capabilities"][0]:
        why = (f"no single build covers {oldest} (CUDA 12.6 build only) and {newest} (CUDA 13.0 build only): "
               f"use one kind of GPU (CUDA_VISIBLE_DEVICES) and run the setup for it")
    else:
        why = (f"{newest} needs the CUDA 13.0 build, which needs driver {PYPI_CUDA13['driver']} or later "
               f"(this one runs CUDA {driver})")
    raise NoTorchBuild(f"no torch {TORCH_VERSION} build runs here: {why}")


def machine_torch_build() -> TorchBuild:
    """:func:`choose_torch_build` for this machine."""
    gpus = listed_gpus()
    return choose_torch_build(gpus, driver_cuda_version() if gpus else None)


def require_torch_to_see_the_gpus() -> None:
    """Refuse to go on where ``nvidia-smi`` lists GPUs that torch cannot use (a CPU build, or a CUDA build newer
    than the driver): without this a recipe silently trains on the CPU. A deliberately hidden GPU
    (``CUDA_VISIBLE_DEVICES=`` or ``-1``) is the way to run on the CPU of a GPU machine."""
    # torch takes ~9 s to import: the setup imports this module before torch is installed
    import torch

    if torch.cuda.is_available() or os.environ.get("CUDA_VISIBLE_DEVICES", "unset").strip() in ("", "-1"):
        return
    gpus = listed_gpus()
    if not gpus:
        return
    driver_cuda = driver_cuda_version()
    driver = f", the driver runs CUDA {driver_cuda[0]}.{driver_cuda[1]}" if driver_cuda else ""
    raise NoTorchBuild(f"nvidia-smi lists {describe(gpus)} but torch {torch.__version__} "
                       f"cannot use them ({installed_build_name()}{driver}): run bash tools/setup.sh to install the "
                       f"build for this driver, or set CUDA_VISIBLE_DEVICES= to run on the CPU")


def installed_build_name() -> str:
    """The installed torch as :func:`require_torch_to_see_the_gpus` names it: "a CUDA 13.0 build" (PyPI's Linux
    wheel) or "a CPU build" (e.g. from a local wheel mirror)."""
    # torch takes ~9 s to import: only a refusal that names the build pays for it
    import torch

    return f"a CUDA {torch.version.cuda} build" if torch.version.cuda else "a CPU build"
