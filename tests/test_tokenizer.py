"""tools/train_tokenizer.py and duet.data.tokenizer: NeMo layout, round trip, NeMo loading, size errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sentencepiece as spm

from duet.data.tokenizer import VocabularyTooLarge, manifest_texts, train_tokenizer

WORDS = ("set a timer for five minutes turn on the kitchen lights what is the weather like in paris "
         "play some quiet music add milk to my shopping list what is twelve plus seven how many grams "
         "are in a pound remind me to call my sister tomorrow morning").split()
TEXTS = [" ".join(WORDS[(i * 7) % len(WORDS): (i * 7) % len(WORDS) + 4 + i % 5]) for i in range(200)]


@pytest.fixture(scope="module")
def bpe_dir(tmp_path_factory) -> Path:
    return train_tokenizer(TEXTS, tmp_path_factory.mktemp("tok") / "spe_bpe_v64", vocab_size=64)


def test_nemo_layout_and_exact_size(bpe_dir):
    assert sorted(p.name for p in bpe_dir.iterdir()) == ["source.json", "tokenizer.model", "tokenizer.vocab", "train.log",
                                                       "vocab.txt"]
    sp = spm.SentencePieceProcessor(model_file=str(bpe_dir / "tokenizer.model"))
    assert sp.get_piece_size() == 64


def test_round_trip_on_seen_and_unseen_text(bpe_dir):
    sp = spm.SentencePieceProcessor(model_file=str(bpe_dir / "tokenizer.model"))
    for text in (TEXTS[3], "turn off the music please"):
        ids = sp.encode(text)
        assert sp.decode(ids) == text
    assert len(sp.encode(TEXTS[0])) < len(TEXTS[0].replace(" ", ""))  # it merged something


def test_loads_in_nemo(bpe_dir):
    from nemo.collections.common.tokenizers.sentencepiece_tokenizer import SentencePieceTokenizer

    tokenizer = SentencePieceTokenizer(str(bpe_dir / "tokenizer.model"))
    assert tokenizer.vocab_size == 64
    assert tokenizer.ids_to_text(tokenizer.text_to_ids("set a timer")) == "set a timer"


def test_too_large_vocabulary_names_the_largest_that_fits(tmp_path):
    with pytest.raises(VocabularyTooLarge) as err:
        train_tokenizer(TEXTS, tmp_path / "spe_bpe_v4000", vocab_size=4000)
    largest = err.value.largest
    assert 0 < largest < 4000 and f"largest that fits is {largest}" in str(err.value)
    assert not (tmp_path / "spe_bpe_v4000").exists()
    # the size it names really does train
    train_tokenizer(TEXTS, tmp_path / f"spe_bpe_v{largest}", vocab_size=largest)


def test_unigram_type(tmp_path):
    out = train_tokenizer(TEXTS, tmp_path / "spe_unigram_v48", vocab_size=48, tokenizer_type="unigram")
    sp = spm.SentencePieceProcessor(model_file=str(out / "tokenizer.model"))
    assert sp.get_piece_size() == 48 and sp.decode(sp.encode(TEXTS[5])) == TEXTS[5]


def test_manifest_text_errors_name_the_line(tmp_path):
    manifest = tmp_path / "m.json"
    manifest.write_text(json.dumps({"text": "ok"}) + "\n" + json.dumps({"text": " "}) + "\n")
    with pytest.raises(ValueError, match=r"m.json:2: empty"):
        manifest_texts([manifest])


def test_cli_default_folder_name_and_rerun(tmp_path, python, repo_root):
    import subprocess

    manifest = tmp_path / "train.json"
    manifest.write_text("".join(json.dumps({"audio_filepath": "/x.flac", "duration": 1.0, "text": t}) + "\n"
                                for t in TEXTS))
    cmd = [python, "tools/train_tokenizer.py", "--manifests", str(manifest), "--vocab-size", "40",
           "--out-root", str(tmp_path / "tokenizers")]
    first = subprocess.run(cmd, cwd=repo_root, capture_output=True, text=True, timeout=300)
    assert first.returncode == 0, first.stderr
    assert (tmp_path / "tokenizers" / "spe_bpe_v40" / "vocab.txt").is_file()
    second = subprocess.run(cmd, cwd=repo_root, capture_output=True, text=True, timeout=300)
    assert "skipped" in second.stdout
    # changed training text, same settings: retrained, not skipped
    manifest.write_text("".join(json.dumps({"audio_filepath": "/x.flac", "duration": 1.0, "text": t.upper()}) + "\n"
                                for t in TEXTS))
    third = subprocess.run(cmd, cwd=repo_root, capture_output=True, text=True, timeout=300)
    assert third.returncode == 0 and "skipped" not in third.stdout, third.stdout + third.stderr
    vocab = (tmp_path / "tokenizers" / "spe_bpe_v40" / "vocab.txt").read_text()
    assert vocab.upper() == vocab  # trained on the new (upper-case) text
    missing = subprocess.run(cmd[:2] + ["--manifests", str(tmp_path / "nope.json")], cwd=repo_root,
                             capture_output=True, text=True, timeout=300)
    assert missing.returncode == 2 and "nope.json not found" in missing.stderr
