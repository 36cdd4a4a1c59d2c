"""Loading an entry script (tools/, bench/) as a module, so that tests call its functions and main()."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def load_script(path: Path, name: str | None = None) -> ModuleType:
    """The script at ``path`` imported as module ``name`` (default: its file name), registered in sys.modules
    (dataclasses look their module up there)."""
    name = name or path.stem
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
