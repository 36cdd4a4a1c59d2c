"""Loopback rehearsal of the real ASR path (issue 19, c): the full-size recipes on stand-in checkpoints.

Random-weight ``.nemo`` files at the ``stt_en_conformer_ctc_small`` architecture (configs/conformer_small.yaml:
16 x 176, 4 heads, striding 4x, kernel 31) and at FastConformer small (dw_striding 8x), each with a 1024-piece
BPE tokenizer, are fine-tuned for two steps through ``nemo_recipes/finetune_ctc.py`` on a few bundled sample
utterances: keeping the checkpoint's tokenizer, and switching to a new 1024-piece one made by
tools/train_tokenizer.py. The pretrained-name route runs offline: NeMo's ``from_pretrained`` reuses a file in
its cache folder (``$NEMO_CACHE_DIR``) without any network call, so the conformer stand-in is put there by
NeMo's own downloader (its ``urlretrieve`` replaced by a local copy) and the recipe is run with the name.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
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
    from duet.tokenizer import manifest_texts, train_tokenizer

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
    output = proc.stdout + proc.stderr
    assert "Re-using file from" in output and "Downloading from" not in output
    differences = summary["architecture_differences"]
    assert differences["subsampling"] == ["striding", "dw_striding"]
    assert differences["subsampling_factor"] == [4, 8] and differences["conv_kernel_size"] == [31, 9]
    assert "The checkpoint's encoder is not fastconformer_small's" in output
    assert _saved_vocabulary(summary["model"]) == stand_ins["own_vocabulary"]
