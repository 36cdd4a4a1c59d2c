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


def pytest_configure(config):
    """Under pytest-xdist, each worker (and every process its tests start) gets its share of the cores as its
    thread count, unless OMP_NUM_THREADS is already set: two workers of two threads each on a 2-core machine
    spend much of their time waiting for each other's threads (RESULTS.md, "CI time")."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if workers > 1 and "OMP_NUM_THREADS" not in os.environ:
        from duet.foundation import usable_cores  # (nothing but paths: no heavy import before the threads are set)

        share = max(1, usable_cores() // workers)
        os.environ["OMP_NUM_THREADS"] = str(share)
        if "torch" in sys.modules:  # already loaded, its thread pool sized: tell it too
            sys.modules["torch"].set_num_threads(share)


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
    from duet.data.manifest import build_split_manifest, write_manifest

    out = tmp_path_factory.mktemp("manifests")
    paths = {}
    for split in ("train-clean", "dev-clean", "test-clean"):
        paths[split] = out / f"{split}.json"
        write_manifest(paths[split], build_split_manifest(SAMPLES / "LibriSpeech" / split).entries)
    return paths


@pytest.fixture(scope="session")
def sample_tokenizer(sample_manifests, tmp_path_factory) -> Path:
    """The demo's tokenizer (256 BPE pieces on the sample's training text), built once per session."""
    from duet.data.tokenizer import manifest_texts, train_tokenizer

    return train_tokenizer(manifest_texts([sample_manifests["train-clean"]]),
                           tmp_path_factory.mktemp("tokenizers") / "spe_bpe_v256", vocab_size=256)


@pytest.fixture(scope="session")
def micro_model_and_manifest(tmp_path_factory):
    """A 1-layer random-weight FastConformer-CTC (in memory and saved as ``micro.nemo``) with a 40-token
    tokenizer, and a manifest of 7 bundled train-clean utterances: ``(model, nemo_path, manifest, entries)``."""
    from tests.asr_helpers import SAMPLE_TRAIN, build_micro_model, sample_utterances, train_tokenizer, write_manifest

    if not SAMPLE_TRAIN.is_dir():
        pytest.skip("bundled sample missing: run tools/make_sample_corpus.py")
    root = tmp_path_factory.mktemp("asr_eval")
    entries = sample_utterances(7)
    tok = train_tokenizer([e["text"] for e in entries], root / "tok", 40)
    model = build_micro_model(tok, seed=5)
    model.eval()
    path = root / "micro.nemo"
    model.save_to(str(path))
    return model, path, write_manifest(root / "test.json", entries), entries


@pytest.fixture(scope="session")
def bundled_base_model():
    """The bundled base checkpoint (samples/checkpoints, in git), loaded on CPU: ``(model, nemo_path)``. Trained,
    so unlike the random micro model it writes several words per utterance (word timing tests need them)."""
    from duet.asr.inference import load_asr_model

    path = SAMPLES / "checkpoints" / "fastconformer_tiny_base.nemo"
    if not path.is_file():
        pytest.skip("bundled base checkpoint missing")
    return load_asr_model(path, device="cpu"), path


@pytest.fixture(scope="session")
def bundled_token_lm(bundled_base_model, tmp_path_factory) -> Path:
    """A token 3-gram ARPA (KenLM lmplz) over the bundled base checkpoint's tokenizer, from the sample's
    train-clean transcripts (beam_lm on a model whose output has real words)."""
    from duet.asr.ngram import find_kenlm_tool, train_ngram_lm
    from tests.asr_helpers import sample_utterances

    if find_kenlm_tool("lmplz") is None:
        pytest.skip("KenLM lmplz not built: run bash tools/setup.sh")
    model, _ = bundled_base_model
    arpa = tmp_path_factory.mktemp("lm") / "bundled_token3.arpa"
    train_ngram_lm([e["text"] for e in sample_utterances(200)], arpa, order=3, unit="token",
                   tokenizer=model.tokenizer, text_source="sample train-clean", binary=False)
    return arpa


@pytest.fixture(scope="session")
def micro_token_lm(micro_model_and_manifest, tmp_path_factory) -> Path:
    """A token 3-gram ARPA (KenLM lmplz) over the micro model's tokenizer, from its manifest's transcripts."""
    from duet.asr.ngram import find_kenlm_tool, train_ngram_lm

    if find_kenlm_tool("lmplz") is None:
        pytest.skip("KenLM lmplz not built: run bash tools/setup.sh")
    model, _, _, entries = micro_model_and_manifest
    arpa = tmp_path_factory.mktemp("lm") / "micro_token3.arpa"
    train_ngram_lm([e["text"] for e in entries], arpa, order=3, unit="token", tokenizer=model.tokenizer,
                   text_source="micro manifest", binary=False)
    return arpa


@pytest.fixture(scope="session")
def tiny_streaming_model(tmp_path_factory):
    """A random-weight 4-layer cache-aware FastConformer-CTC (configs/fastconformer_small_streaming.yaml with
    its tiny CPU overrides: look-ahead 480 ms, chunk 560 ms) with a 40-token tokenizer."""
    from duet.data.tokenizer import train_tokenizer
    from tests.asr_helpers import ASSISTANT_SENTENCES, TINY_STREAMING, build_ctc_model

    tokenizer = train_tokenizer(ASSISTANT_SENTENCES, tmp_path_factory.mktemp("tok") / "spe_bpe_v40", vocab_size=40)
    # seed 8: random weights that emit varied tokens on un-normalised (normalize: NA) features, and a
    # transcript that grows chunk by chunk (seeds 4, 5, 13 emit one token on every frame, i.e. one letter),
    # so that comparing streaming with offline transcripts checks every frame
    return build_ctc_model("fastconformer_small_streaming", tokenizer, TINY_STREAMING, seed=8)


@pytest.fixture(scope="session")
def tiny_streaming_nemo(tiny_streaming_model, tmp_path_factory) -> Path:
    """``tiny_streaming_model`` saved as a .nemo file, for the entry scripts."""
    path = tmp_path_factory.mktemp("streaming") / "streaming.nemo"
    tiny_streaming_model.save_to(str(path))
    return path


@pytest.fixture(scope="session")
def tiny_slm_folder(tmp_path_factory) -> Path:
    """A real (untrained, tiny) GPT-2 folder as slm/finetune.py writes one."""
    from slm.modeling import build_scratch_model, train_bpe_tokenizer

    folder = tmp_path_factory.mktemp("tiny_slm")
    tokenizer = train_bpe_tokenizer(["set a timer for five minutes", "play some jazz"] * 20, vocab_size=300)
    # 512 positions: room for the Alpaca prompt around a transcript and a 64-token answer
    build_scratch_model(tokenizer, n_layer=1, n_embd=16, n_head=2, n_positions=512, dropout=0.0, seed=0) \
        .save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
