"""Loopback rehearsal of the real ASR path (issue 19, c): the full-size recipes on stand-in checkpoints.

Random-weight ``.nemo`` files at the ``stt_en_conformer_ctc_small`` architecture (configs/conformer_small.yaml:
16 x 176, 4 heads, striding 4x, kernel 31) and at FastConformer small (dw_striding 8x), each with a 1024-piece
BPE tokenizer, are fine-tuned for two steps through ``nemo_recipes/finetune_ctc.py`` on a few bundled sample
utterances: keeping the checkpoint's tokenizer, and switching to a new 1024-piece one made by
tools/train_tokenizer.py. The pretrained-name route runs offline: NeMo's ``from_pretrained`` reuses a file in
its cache folder (``$NEMO_CACHE_DIR``) without any network call, so the conformer stand-in is put there by
NeMo's own downloader (its ``urlretrieve`` replaced by a local copy) and the recipe is run with the name.

The download itself is rehearsed against a stand-in NGC on 127.0.0.1 (NeMo's request for the name redirected there)
that cuts its answers halfway: nothing half-written may reach the cache, a cached file that does not restore is
fetched once more, and a process that finds another downloading waits for it and reuses its file.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from unittest import mock

import pytest

pytest.importorskip("nemo.collections.asr")

from tests.asr_helpers import REPO, SAMPLE_TRAIN, build_ctc_model, write_manifest  # noqa: E402

pytestmark = pytest.mark.slow

SCRIPT = REPO / "nemo_recipes" / "finetune_ctc.py"
PRETRAINED_NAME = "stt_en_conformer_ctc_small"
VOCAB = 1024  # the size of stt_en_conformer_ctc_small's tokenizer


def _read_manifest(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _vocabulary(tokenizer_dir: Path) -> list[str]:
    from nemo.collections.common.tokenizers import SentencePieceTokenizer

    return list(SentencePieceTokenizer(str(tokenizer_dir / "tokenizer.model")).vocab)


def _cache_pretrained_name(nemo_file: Path, cache_dir: Path) -> Path:
    """Put ``nemo_file`` where ``EncDecCTCModelBPE.from_pretrained(PRETRAINED_NAME)`` looks, via NeMo's own
    resolution (``ModelPT._get_ngc_pretrained_model_info`` -> ``nemo.utils.cloud.maybe_download_from_cloud``),
    its download replaced by a copy of the local file."""
    from nemo.collections.asr.models import EncDecCTCModelBPE

    def copy_instead_of_download(url, destination):
        assert url.endswith(f"/{PRETRAINED_NAME}.nemo"), url
        shutil.copyfile(nemo_file, destination)
        return destination, None

    with mock.patch.dict(os.environ, {"NEMO_CACHE_DIR": str(cache_dir)}), \
            mock.patch("urllib.request.urlretrieve", copy_instead_of_download):
        return Path(EncDecCTCModelBPE.from_pretrained(PRETRAINED_NAME, return_model_file=True))


@pytest.fixture(scope="module")
def stand_ins(python, tmp_path_factory):
    """Sample manifests (a handful of utterances), the stand-in checkpoints, the switch tokenizer, NeMo's cache."""
    if not SAMPLE_TRAIN.is_dir():
        pytest.skip("bundled sample missing: run tools/make_sample_corpus.py")
    from duet.data.tokenizer import manifest_texts, train_tokenizer

    root = tmp_path_factory.mktemp("real_path_asr")
    subprocess.run([python, str(REPO / "tools" / "make_manifest.py"), "--out-dir", str(root / "manifests")],
                   check=True, capture_output=True, cwd=REPO)
    manifests = {split: root / "manifests" / f"{split}.json" for split in ("train-clean", "dev-clean", "test-clean")}
    # the checkpoints' own tokenizer: other text than the recipe's (train + dev), as a released model's would be
    own_tok = train_tokenizer(manifest_texts([manifests["train-clean"], manifests["dev-clean"]]),
                              root / "own" / f"spe_bpe_v{VOCAB}", VOCAB)
    # the switch: what a user runs, on the training manifest only
    subprocess.run([python, str(REPO / "tools" / "train_tokenizer.py"), "--manifests", str(manifests["train-clean"]),
                    "--vocab-size", str(VOCAB), "--out-root", str(root / "new")], check=True, capture_output=True,
                   cwd=REPO)
    new_tok = root / "new" / f"spe_bpe_v{VOCAB}"
    own_vocabulary, new_vocabulary = _vocabulary(own_tok), _vocabulary(new_tok)
    assert len(own_vocabulary) == len(new_vocabulary) == VOCAB and own_vocabulary != new_vocabulary

    def shortest(split: str, n: int) -> Path:
        entries = sorted(_read_manifest(manifests[split]), key=lambda e: e["duration"])[:n]
        return write_manifest(root / f"{split}.few.json", entries)

    checkpoints = {}
    for config_name in ("conformer_small", "fastconformer_small"):
        path = root / f"{config_name}_standin.nemo"
        model = build_ctc_model(config_name, own_tok)
        encoder = model.cfg.encoder
        assert (encoder.n_layers, encoder.d_model, encoder.n_heads) == (16, 176, 4)  # the "full size"
        model.save_to(str(path))
        checkpoints[config_name] = path
    cache_dir = root / "nemo_cache"
    cached = _cache_pretrained_name(checkpoints["conformer_small"], cache_dir)
    assert cached.is_relative_to(cache_dir) and cached.read_bytes() == checkpoints["conformer_small"].read_bytes()
    return {"train": shortest("train-clean", 4), "dev": shortest("dev-clean", 2), "test": shortest("test-clean", 2),
            "own_vocabulary": own_vocabulary, "new_vocabulary": new_vocabulary, "new_tok": new_tok,
            "checkpoints": checkpoints, "cache_dir": cache_dir}


def _finetune(python: str, setup: dict, config_name: str, exp_dir: Path, *init_and_tokenizer: str,
              env: dict | None = None) -> tuple[subprocess.CompletedProcess, dict]:
    args = [
        "--config-name", config_name, *init_and_tokenizer,
        f"model.train_ds.manifest_filepath={setup['train']}",
        f"model.validation_ds.manifest_filepath={setup['dev']}",
        f"model.test_ds.manifest_filepath={setup['test']}",
        "model.train_ds.batch_size=2", "model.validation_ds.batch_size=2", "model.test_ds.batch_size=2",
        "model.train_ds.num_workers=0", "model.validation_ds.num_workers=0", "model.test_ds.num_workers=0",
        "trainer.max_steps=2", "trainer.log_every_n_steps=1", "trainer.enable_progress_bar=false",
        "evaluate_before_fit=false", f"exp_manager.exp_dir={exp_dir}", f"name={config_name}",
    ]
    proc = subprocess.run([python, str(SCRIPT), *args], capture_output=True, text=True, timeout=600, cwd=REPO,
                          env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((exp_dir / config_name / "finetune_summary.json").read_text())
    assert summary["global_step"] == 2 and Path(summary["model"]).is_file()
    assert summary["test_after"]["utterances"] == 2
    return proc, summary


def _saved_vocabulary(nemo_file: str) -> list[str]:
    from nemo.collections.asr.models import ASRModel

    model = ASRModel.restore_from(nemo_file, map_location="cpu")
    assert model.decoder.num_classes_with_blank == model.tokenizer.vocab_size + 1
    return list(model.tokenizer.vocab)


@pytest.mark.parametrize("config_name", ["conformer_small", "fastconformer_small"])
def test_full_size_finetune_keeps_the_checkpoint_tokenizer(python, stand_ins, config_name, tmp_path):
    _, summary = _finetune(python, stand_ins, config_name, tmp_path,
                           f"init_from_nemo_model={stand_ins['checkpoints'][config_name]}", "model.tokenizer.dir=null")
    assert summary["vocabulary_changed"] is False and summary["architecture_differences"] == {}
    assert _saved_vocabulary(summary["model"]) == stand_ins["own_vocabulary"]


@pytest.mark.parametrize("config_name", ["conformer_small", "fastconformer_small"])
def test_full_size_finetune_switches_to_a_new_1024_piece_tokenizer(python, stand_ins, config_name, tmp_path):
    _, summary = _finetune(python, stand_ins, config_name, tmp_path,
                           f"init_from_nemo_model={stand_ins['checkpoints'][config_name]}",
                           f"model.tokenizer.dir={stand_ins['new_tok']}")
    assert summary["vocabulary_changed"] is True and summary["decoder_transfer"]["pieces"] == VOCAB
    assert _saved_vocabulary(summary["model"]) == stand_ins["new_vocabulary"]


def test_pretrained_name_from_nemo_cache_offline_under_the_fastconformer_config_warns(python, stand_ins, tmp_path):
    """``--config-name fastconformer_small init_from_pretrained_model=stt_en_conformer_ctc_small``: the name
    resolves from NeMo's cache with the network unroutable, and the Conformer it loads is named as such."""
    env = {**os.environ, "NEMO_CACHE_DIR": str(stand_ins["cache_dir"]), "HF_HUB_OFFLINE": "1",
           "HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9"}
    proc, summary = _finetune(python, stand_ins, "fastconformer_small", tmp_path,
                              f"init_from_pretrained_model={PRETRAINED_NAME}", "model.tokenizer.dir=null", env=env)
    library_log = (tmp_path / "logs" / "finetune_ctc_fastconformer_small.log").read_text()  # NeMo's lines
    assert "Re-using file from" in library_log and "Downloading from" not in library_log + proc.stdout + proc.stderr
    output = proc.stdout  # the recipe's own lines
    differences = summary["architecture_differences"]
    assert differences["subsampling"] == ["striding", "dw_striding"]
    assert differences["subsampling_factor"] == [4, 8] and differences["conv_kernel_size"] == [31, 9]
    assert "The checkpoint's encoder is not fastconformer_small's" in output
    assert _saved_vocabulary(summary["model"]) == stand_ins["own_vocabulary"]


def _gpu_path_finetune_overrides() -> list[str]:
    """The overrides of the GPU fine-tune command in docs/gpu-path.md ((1)), as a user copies them."""
    block = (REPO / "docs" / "gpu-path.md").read_text().split("```bash", 1)[1].split("```", 1)[0]
    command = block.split("python nemo_recipes/finetune_ctc.py", 1)[1].split("\n# ", 1)[0]
    words = " ".join(line.split("#", 1)[0].rstrip(" \\") for line in command.splitlines()).split()
    assert words[:2] == ["--config-name", "conformer_small"], words
    return words[2:]


def test_the_gpu_path_command_keeps_the_checkpoint_tokenizer(python, stand_ins, tmp_path):
    """The GPU path's command for stt_en_conformer_ctc_small, its manifests swapped for the stand-ins': the checkpoint's
    tokenizer and trained output layer are kept (a new tokenizer would replace that layer)."""
    overrides = [o for o in _gpu_path_finetune_overrides() if ".manifest_filepath=" not in o]
    assert f"init_from_pretrained_model={PRETRAINED_NAME}" in overrides
    env = {**os.environ, "NEMO_CACHE_DIR": str(stand_ins["cache_dir"]), "HF_HUB_OFFLINE": "1",
           "HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9"}
    _, summary = _finetune(python, stand_ins, "conformer_small", tmp_path, *overrides, env=env)
    assert summary["vocabulary_changed"] is False and summary["architecture_differences"] == {}
    assert _saved_vocabulary(summary["model"]) == stand_ins["own_vocabulary"]

# --- the pretrained download, against a stand-in NGC on 127.0.0.1 ------------------------------------------------

NGC = "https://api.ngc.nvidia.com"


class StandInNgc(BaseHTTPRequestHandler):
    """Serves ``data`` for any path. ``mode``: "ok"; "cut" = the full Content-Length announced, half sent, connection
    closed (urlretrieve raises); "short" = half sent without a Content-Length (urlretrieve cannot tell)."""

    data: bytes
    mode: str
    requests: list

    def do_GET(self):
        self.requests.append(self.path)
        half = self.mode != "ok"
        self.send_response(200)
        if self.mode != "short":
            self.send_header("Content-Length", str(len(self.data)))
        self.end_headers()
        self.wfile.write(self.data[: len(self.data) // 2] if half else self.data)
        self.close_connection = True

    def log_message(self, *args):
        pass


@pytest.fixture
def stand_in_ngc(tmp_path, monkeypatch):
    """(handler class, cache dir): a micro .nemo served on 127.0.0.1, NeMo's NGC URLs redirected there, its cache in
    tmp_path."""
    from tests.asr_helpers import ASSISTANT_SENTENCES, build_micro_model, train_tokenizer

    nemo_file = tmp_path / "served.nemo"
    build_micro_model(train_tokenizer(ASSISTANT_SENTENCES, tmp_path / "tok", 40)).save_to(str(nemo_file))
    handler = type("Handler", (StandInNgc,), {"data": nemo_file.read_bytes(), "mode": "ok", "requests": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    real_urlretrieve = urllib.request.urlretrieve

    def to_loopback(url, filename=None, *args, **kwargs):
        assert url.startswith(NGC + "/") and url.endswith(f"/{PRETRAINED_NAME}.nemo"), url
        return real_urlretrieve(base + url.removeprefix(NGC), filename, *args, **kwargs)

    for name in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NEMO_CACHE_DIR", str(tmp_path / "nemo_cache"))
    monkeypatch.setattr(urllib.request, "urlretrieve", to_loopback)
    try:
        yield handler, tmp_path / "nemo_cache"
    finally:
        server.shutdown()
        server.server_close()


def _load_pretrained(trainer=None):
    from omegaconf import OmegaConf

    from duet.asr import recipe

    cfg = OmegaConf.create({"name": "t", "init_from_nemo_model": None, "init_from_pretrained_model": PRETRAINED_NAME,
                            "model": {"tokenizer": {"dir": None}}})
    return recipe.load_base_model(cfg, trainer)


def _cached(cache_dir: Path) -> list[Path]:
    """Every file and folder under the cache except lock files (what a later run could mistake for the model)."""
    return sorted(p for p in cache_dir.rglob("*") if p.is_file() and not p.name.endswith(".lock"))


def test_a_pretrained_download_cut_halfway_never_reaches_the_cache(stand_in_ngc, caplog):
    from duet.asr.recipe import RecipeError

    handler, cache_dir = stand_in_ngc
    handler.mode = "cut"  # the link drops on every one of NeMo's three attempts
    with pytest.raises(RecipeError, match=f"init_from_pretrained_model={PRETRAINED_NAME}: could not download it") as e:
        _load_pretrained()
    assert len(handler.requests) == 3, e.value
    assert _cached(cache_dir) == []  # main left the half file as the cached model

    handler.mode = "ok"  # the next run downloads it whole
    model = _load_pretrained()
    assert model.tokenizer.vocab_size == 40 and len(handler.requests) == 4
    (cached,) = _cached(cache_dir)
    assert cached.name == f"{PRETRAINED_NAME}.nemo" and cached.read_bytes() == handler.data

    # a half file in the cache (left by an older NeMo, or by a server that sent no length) is named and fetched again
    cached.write_bytes(handler.data[: len(handler.data) // 2])
    with caplog.at_level(logging.WARNING, logger="duet.asr.recipe"):
        _load_pretrained()
    assert f"the cached {cached} does not restore" in caplog.text and "fetching it again" in caplog.text
    assert len(handler.requests) == 5 and cached.read_bytes() == handler.data

    # once only: a server that keeps sending half a file is an error naming the file
    cached.write_bytes(handler.data[: len(handler.data) // 2])
    handler.mode = "short"
    with pytest.raises(RecipeError, match=f"{cached} does not restore even when fetched again"):
        _load_pretrained()
    assert len(handler.requests) == 6


def test_a_process_that_finds_the_download_under_way_waits_and_reuses_it(stand_in_ngc):
    """Another rank holds the download lock (it is downloading): this one waits, then reuses that rank's file."""
    from filelock import FileLock

    handler, cache_dir = stand_in_ngc
    _load_pretrained()
    (cached,) = _cached(cache_dir)
    cached.unlink()
    other_rank = FileLock(f"{cached}.lock")
    other_rank.acquire()
    loaded = {}
    waiting = threading.Thread(target=lambda: loaded.setdefault("model", _load_pretrained()))
    waiting.start()
    try:
        time.sleep(3)
        assert waiting.is_alive() and len(handler.requests) == 1  # no second download while the lock is held
        cached.write_bytes(handler.data)  # what the other rank's download leaves
    finally:
        other_rank.release()
    waiting.join(timeout=120)
    assert "model" in loaded and len(handler.requests) == 1
