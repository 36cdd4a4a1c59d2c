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


@pytest.fixture(scope="session")
def sample_manifests(tmp_path_factory) -> dict[str, Path]:
    """NeMo manifests of the bundled sample, built once per session (what tools/make_manifest.py writes)."""
    from duet.io import write_jsonl_atomic
    from duet.manifest import build_split_manifest

    out = tmp_path_factory.mktemp("manifests")
    paths = {}
    for split in ("train-clean", "dev-clean", "test-clean"):
        paths[split] = out / f"{split}.json"
        write_jsonl_atomic(paths[split], build_split_manifest(SAMPLES / "LibriSpeech" / split).entries)
    return paths


@pytest.fixture(scope="session")
def sample_tokenizer(sample_manifests, tmp_path_factory) -> Path:
    """The demo's tokenizer (256 BPE pieces on the sample's training text), built once per session."""
    from duet.tokenizer import manifest_texts, train_tokenizer

    return train_tokenizer(manifest_texts([sample_manifests["train-clean"]]),
                           tmp_path_factory.mktemp("tokenizers") / "spe_bpe_v256", vocab_size=256)
