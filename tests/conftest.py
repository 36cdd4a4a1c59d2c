"""Shared pytest setup. Tiers: unit (default), integration (runs entry points on samples/), slow (-m slow)."""

import os
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
SAMPLES = REPO_ROOT / "samples"

# Nothing in the test suite may reach a hub: make transformers / datasets / huggingface_hub fail fast.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def python() -> str:
    """The interpreter running the tests, for subprocess calls of the entry scripts."""
    return sys.executable


def pytest_collection_modifyitems(config, items):
    """Run the slow tier last, so that fast failures show up first and CI gets the cheap tiers in any case."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is not None)
