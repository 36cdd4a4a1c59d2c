"""duet's NeMo module classes, allowed as ``_target_`` in NeMo configs (and so inside ``.nemo`` files).

NeMo 3 instantiates a config's ``_target_`` only from an allow-list of prefixes in
``nemo.core.classes.common.ALLOWED_TARGET_PREFIXES``, checked before the class is imported. A ``.nemo``
whose encoder is :class:`duet.asr.whisper_encoder.WhisperEncoder` must restore through
``ASRModel.restore_from`` in any process where duet is installed, with no duet import first: the setup
installs ``duet-nemo-targets.pth`` into the environment's site-packages, whose one line calls :func:`install`
at interpreter start. That costs one entry in ``sys.meta_path``: NeMo is not imported until something else
imports it, and only then are the exact class paths below (never a package prefix) appended to its list.
The same start-up call lets NeMo unpack a ``.nemo`` on a Python without tarfile's extraction filters (stock
Debian 12's 3.11.2: ``duet.foundation.tarfile_filter``).
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys

from duet.foundation import tarfile_filter

NEMO_COMMON = "nemo.core.classes.common"
TARGETS = (
    "duet.asr.whisper_encoder.WhisperEncoder",
    "duet.asr.whisper_encoder.WhisperLogMelPreprocessor",
    "duet.asr.resmha.ResidualAttentionConformerEncoder",
)
PTH_NAME = "duet-nemo-targets.pth"
PTH_LINE = "import duet.nemo_targets as t; t.install()\n"


def allow(common_module) -> None:
    for target in TARGETS:
        if target not in common_module.ALLOWED_TARGET_PREFIXES:
            common_module.ALLOWED_TARGET_PREFIXES.append(target)


class _AllowAfterImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: when NeMo's ``common`` module is first imported, wraps its loader so the
    allow-list is extended right after the module has run."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != NEMO_COMMON:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        run_module = spec.loader.exec_module

        def exec_module(module):
            run_module(module)
            allow(module)

        spec.loader.exec_module = exec_module
        return spec


def install() -> None:
    """Allow duet's targets now if NeMo is loaded, else as soon as it is (and give tarfile its ``filter``
    keyword where this Python lacks it)."""
    tarfile_filter.install()
    if NEMO_COMMON in sys.modules:
        allow(sys.modules[NEMO_COMMON])
    elif not any(isinstance(finder, _AllowAfterImport) for finder in sys.meta_path):
        sys.meta_path.insert(0, _AllowAfterImport())
