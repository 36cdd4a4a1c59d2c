#!/usr/bin/env python
r"""Plot an utterance as the model sees it: waveform, mel, log-mel and SpecAugment-masked log-mel -> PNG.

Usage:
  # with a trained model's own preprocessor and SpecAugment modules
  python tools/plot_features.py --model samples/checkpoints/fastconformer_tiny_base.nemo \
      --audio samples/LibriSpeech/test-clean/<spk>/<chapter>/<utt>.flac --out features.png

  # without a model: the modules are built from a recipe config (default configs/fastconformer_small.yaml)
  python tools/plot_features.py --audio some.flac --config-name conformer_small --out features.png

The mel panel uses the same preprocessor settings with log and normalisation switched off; the masked
panel applies the SpecAugment module in training mode (--seed fixes which bins and frames are masked). NeMo's log
lines go to --log (experiments/logs/plot_features.log), or with --verbose to standard error.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf, open_dict

from duet.errors import DuetError
from duet.foundation import REPO_ROOT
from duet.foundation.errors import cli
from duet.foundation.files import add_log_arguments, library_output_to, log_target, save_png_atomic


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--audio", required=True, type=Path, help="an audio file (resampled to the model's rate)")
    parser.add_argument("--model", type=Path, default=None, help="a .nemo checkpoint whose modules are used")
    parser.add_argument("--config-name", default="fastconformer_small", help="recipe config used without --model")
    parser.add_argument("--out", type=Path, default=Path("features.png"), help="output PNG (default: features.png)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the SpecAugment masks")
    add_log_arguments(parser, "plot_features")
    return parser


def load_modules(model_path: Path | None, config_name: str):
    """(preprocessor config, preprocessor, spec_augment) from a .nemo or from a recipe config."""
    # NeMo takes ~21 s to import: --help and argument errors answer before it loads
    from nemo.collections.asr.models import ASRModel

    if model_path is not None:
        # torch takes ~9 s to import: --help and argument errors answer before it loads
        from duet.asr.inference import load_asr_model

        model = load_asr_model(model_path, device="cpu")
        return model.cfg.preprocessor, model.preprocessor, model.spec_augmentation

    with initialize_config_dir(config_dir=str(REPO_ROOT / "configs"), version_base=None):
        cfg = compose(config_name=config_name)
    pre_cfg, aug_cfg = cfg.model.preprocessor, cfg.model.spec_augment
    return pre_cfg, ASRModel.from_config_dict(pre_cfg), ASRModel.from_config_dict(aug_cfg)


def compute_panels(audio, sample_rate: int, pre_cfg, preprocessor, spec_augment, seed: int) -> dict:
    # NeMo takes ~21 s to import: --help and argument errors answer before it loads
    import torch
    from nemo.collections.asr.models import ASRModel

    signal = torch.from_numpy(audio)[None]
    length = torch.tensor([signal.shape[1]])
    linear_cfg = OmegaConf.create(OmegaConf.to_container(pre_cfg, resolve=True))
    if "log" not in linear_cfg:
        # not NeMo's mel preprocessor (Whisper's log-mel has no such switches): NeMo's at the same framing shows the mel
        linear_cfg = OmegaConf.create({"_target_": "nemo.collections.asr.modules.AudioToMelSpectrogramPreprocessor",
                                       **{key: linear_cfg[key] for key in ("sample_rate", "window_size",
                                                                           "window_stride", "features")}})
    with open_dict(linear_cfg):
        linear_cfg.log, linear_cfg.normalize, linear_cfg.dither = False, "NA", 0.0
    mel_module = ASRModel.from_config_dict(linear_cfg).eval()
    preprocessor.eval()
    with torch.inference_mode():
        mel, _ = mel_module(input_signal=signal, length=length)
        log_mel, feat_len = preprocessor(input_signal=signal, length=length)
    masked = None
    if spec_augment is not None:
        torch.manual_seed(seed)
        spec_augment.train()
        with torch.inference_mode():
            masked = spec_augment(input_spec=log_mel.clone(), length=feat_len)
    return {"waveform": audio, "seconds": torch.arange(len(audio)).numpy() / sample_rate, "mel": mel[0].numpy(),
            "log_mel": log_mel[0].numpy(), "masked": None if masked is None else masked[0].numpy(), "sample_rate": sample_rate}


def plot_panels(panels: dict, title: str, out: Path) -> None:
    # pyplot takes ~3.5 s to import: --help and argument errors answer before it loads
    import matplotlib.pyplot as plt

    plt.switch_backend("Agg")  # files only: no display is needed or assumed

    fig, axes = plt.subplots(4, 1, figsize=(10, 11))
    t = panels["seconds"]
    axes[0].plot(t, panels["waveform"], linewidth=0.5)
    axes[0].set(title=f"waveform: {title}", xlabel="seconds", ylabel="amplitude", xlim=(0, t[-1]))
    images = [("mel spectrogram (power)", panels["mel"]), ("log-mel, normalised per feature (model input)", panels["log_mel"]),
              ("log-mel after SpecAugment (training only)", panels["masked"])]
    for ax, (name, image) in zip(axes[1:], images):
        if image is None:
            ax.set_axis_off()
            ax.set_title(f"{name}: the model has no SpecAugment module")
            continue
        shown = ax.imshow(image, origin="lower", aspect="auto", interpolation="nearest")
        ax.set(title=name, xlabel="frame (10 ms)", ylabel="mel bin")
        fig.colorbar(shown, ax=ax, pad=0.01)
    save_png_atomic(fig, out)


@cli
def main(argv=None) -> int:
    args = get_parser().parse_args(argv)
    if not args.audio.is_file():
        raise DuetError(f"audio file not found: {args.audio}")
    if args.model is not None and not args.model.is_file():
        raise DuetError(f"model file not found: {args.model}")
    # torch takes ~9 s to import: --help and argument errors answer before it loads
    from duet.asr.inference import load_audio

    with library_output_to(log_target(args)):  # NeMo's lines, restoring or building the modules
        pre_cfg, preprocessor, spec_augment = load_modules(args.model, args.config_name)
        sample_rate = int(pre_cfg.sample_rate)
        audio = load_audio(args.audio, sample_rate)
        panels = compute_panels(audio, sample_rate, pre_cfg, preprocessor, spec_augment, args.seed)
        plot_panels(panels, args.audio.name, args.out)
    print(f"plot_features: {args.audio.name} ({len(audio) / sample_rate:.2f} s, {panels['log_mel'].shape[1]} frames) -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
