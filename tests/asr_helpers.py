"""Shared pieces of the ASR tests: sample-utterance manifests, Hydra composition, a micro CTC model."""

from __future__ import annotations

import json
from pathlib import Path

import soundfile
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

REPO = Path(__file__).resolve().parent.parent
CONFIGS = REPO / "configs"
SAMPLE_TRAIN = REPO / "samples" / "LibriSpeech" / "train-clean"

# Overrides of fastconformer_tiny giving a model whose CPU step takes a fraction of a second.
MICRO_MODEL = [
    "model.encoder.n_layers=1",
    "model.encoder.d_model=48",
    "model.encoder.n_heads=2",
    "model.encoder.subsampling_conv_channels=32",
]


def compose_config(config_name: str, overrides: list[str]):
    with initialize_config_dir(config_dir=str(CONFIGS), version_base=None):
        cfg = compose(config_name=config_name, overrides=overrides)
    OmegaConf.resolve(cfg)
    return cfg


def sample_utterances(n: int) -> list[dict]:
    """The first ``n`` utterances of the bundled sample's train-clean as manifest entries."""
    entries = []
    for trans in sorted(SAMPLE_TRAIN.rglob("*.trans.txt")):
        for line in trans.read_text(encoding="utf-8").splitlines():
            utt_id, text = line.split(" ", 1)
            audio = trans.parent / f"{utt_id}.flac"
            entries.append({"audio_filepath": str(audio), "duration": soundfile.info(str(audio)).duration,
                            "text": text.lower()})
            if len(entries) == n:
                return entries
    return entries


def write_manifest(path: Path, entries: list[dict]) -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in entries), encoding="utf-8")
    return path


def train_tokenizer(texts: list[str], out_dir: Path, vocab_size: int) -> Path:
    from duet.data.tokenizer import train_tokenizer as train

    return train(texts, out_dir, vocab_size)


def build_micro_model(tokenizer_dir: Path, seed: int = 0):
    """A randomly initialised 1-layer FastConformer-CTC (fastconformer_tiny + MICRO_MODEL), no data attached."""
    import torch
    from nemo.collections.asr.models import EncDecCTCModelBPE

    torch.manual_seed(seed)
    cfg = compose_config("fastconformer_tiny", MICRO_MODEL + [f"model.tokenizer.dir={tokenizer_dir}",
                                                              "model.train_ds.manifest_filepath=null",
                                                              "model.validation_ds.manifest_filepath=null"])
    return EncDecCTCModelBPE(cfg=cfg.model)


# The "tiny CPU variant" overrides documented in configs/fastconformer_small_streaming.yaml's header.
TINY_STREAMING = ["model.encoder.n_layers=4", "model.encoder.d_model=96", "model.encoder.subsampling_conv_channels=96"]
ASSISTANT_SENTENCES = ["what is the weather like today", "set a timer for ten minutes", "play some music please",
                       "turn off the lights in the kitchen", "how far is the moon from the earth",
                       "remind me to call mom"]


def build_ctc_model(config_name: str, tokenizer_dir: Path, overrides: list[str] = (), seed: int = 0):
    """A random-weight ``EncDecCTCModelBPE`` from ``configs/<config_name>.yaml`` without datasets (it is run,
    not trained), in eval mode."""
    import torch
    from nemo.collections.asr.models import EncDecCTCModelBPE
    from omegaconf import open_dict

    with initialize_config_dir(config_dir=str(CONFIGS), version_base=None):
        cfg = compose(config_name, overrides=[*overrides, f"model.tokenizer.dir={tokenizer_dir}"])
    with open_dict(cfg.model):
        for split in ("train_ds", "validation_ds", "test_ds"):
            cfg.model.pop(split)
    torch.manual_seed(seed)
    return EncDecCTCModelBPE(cfg=cfg.model).eval()


def transcripts_with(model, settings, paths) -> list[str]:
    """``model``'s transcripts of ``paths`` decoded with ``settings`` (a strategy's settings)."""
    from duet.asr.decoding import build_decoder
    from duet.asr.inference import transcribe_files

    return transcribe_files(model, paths, decoder=build_decoder(model, settings))


def check_words(timed, seconds: float, frame_s: float) -> None:
    """Word times inside the audio (a word ends after the frame that emits its last token), in order, not
    overlapping; words spelling the transcript; confidences in [0, 1]."""
    assert timed.words is not None
    assert " ".join(w.word for w in timed.words) == " ".join(timed.text.split())
    for word in timed.words:
        assert 0 <= word.start <= word.end <= seconds + frame_s, word
        assert 0.0 <= word.confidence <= 1.0, word
    for before, after in zip(timed.words, timed.words[1:]):
        assert before.end <= after.start, (before, after)


def touch(path: Path, data: bytes = b"x") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path
