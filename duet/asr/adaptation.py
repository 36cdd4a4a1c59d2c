"""Adapting the bundled recogniser to one user's recordings (``tools/adapt.py``).

From a folder of audio (pseudo-labelled by Whisper tiny.en, :mod:`duet.asr.pseudo_labelling`) or a manifest with
transcripts: a deterministic held-out part is carved from the user's utterances (:func:`carve`), the base is
fine-tuned on the rest (optionally mixed with a replay of other speech, :func:`mix_replay`) by Lightning with
NeMo's model, validated on the held-out part every few steps; Lightning's ``ModelCheckpoint`` keeps the best step and
its ``EarlyStopping`` ends the run once the held-out WER stops improving. The best step is handed back only when it
beats the base on the held-out part (else the base is), so adapting never makes the model worse on the user's
held-out audio. The held-out part chooses the step and reports before -> after: with a handful of utterances that
figure flatters the adapted model a little (bench/adaptation_ab.py scores on utterances neither step saw).

The run folder holds what reproduces it: ``settings.json`` (resolved), ``adapt.log`` (the console's lines),
``metrics.json``, the manifests (``labels.json``, ``train.json``, ``held_out.json``, ``train_mix.json``), Lightning's
``csv_logs/``, and the result: ``model.nemo`` with the base's ``decoding.json`` beside it, which
``tools/pipeline.py`` and the server read as they are.
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import EarlyStopping, ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger
from omegaconf import OmegaConf, open_dict

from duet import SAMPLES_DIR
from duet.asr import evaluation, recipe
from duet.asr.inference import load_asr_model
from duet.asr.pseudo_labelling import DEFAULT_MIN_CONFIDENCE, WHISPER_TEACHER, PseudoLabelSettings, pseudo_label
from duet.asr.decoding.file import DECODING_FILE_NAME, decoding_file_for
from duet.errors import DuetError
from duet.io import expand_audio_paths
from duet.foundation.files import write_text_atomic
from duet.data.manifest import build_split_manifest, read_manifest, write_manifest
from duet.text import normalize_spoken

BASE_MODEL = SAMPLES_DIR / "checkpoints" / "whisper_tiny_ctc.nemo"
#: The replay when --replay-share is set without --replay: the bundled sample's training speech (synthetic voices),
#: which every user has. Measured, it does not keep other speakers level as real speech of the base's mix does
#: (RESULTS.md, "Adapting to one speaker"), hence no replay by default.
SAMPLE_REPLAY = SAMPLES_DIR / "LibriSpeech" / "train-clean"
#: What moves in an adaptation: the CTC head; the block added on Whisper's encoder and the head; also Whisper's last
#: layer; everything (Whisper's weights at ``encoder_lr_scale`` of the rate).
MOVING = ("head", "block", "last_layer", "all")


class AdaptationError(DuetError):
    """Input the user can fix (too few utterances, a bad setting), named in one line."""


@dataclass(frozen=True)
class AdaptationSettings:
    """What one adaptation does, resolved once from ``tools/adapt.py``'s command line (and saved in the run folder)."""

    source: Path  # a folder (or file) of audio to pseudo-label, or a .json manifest with transcripts
    out: Path
    base: Path = BASE_MODEL
    held_out_share: float = 0.25  # of the user's utterances, carved off for choosing the step and reporting
    seed: int = 0
    moving: str = "block"
    lr: float = 1e-4
    encoder_lr_scale: float = 0.2  # moving="all" only
    max_steps: int = 60
    validate_every: int = 5  # steps
    patience: int = 4  # validations without a better held-out WER before stopping
    batch_size: int = 8
    replay: Path | None = None  # a manifest of other speech mixed into training; None: the bundled sample's train-clean
    replay_share: float = 0.0  # the share of training utterances drawn from the replay (0: none)
    general: Path | None = None  # a manifest scored before and after, to show what else moved
    teacher: str = WHISPER_TEACHER
    min_confidence: float = DEFAULT_MIN_CONFIDENCE
    threads: int = 1

    def validate(self) -> None:
        if self.moving not in MOVING:
            raise AdaptationError(f"--moving must be one of {', '.join(MOVING)}, got {self.moving!r}")
        if not 0.0 < self.held_out_share < 1.0:
            raise AdaptationError(f"--held-out-share must lie in (0, 1), got {self.held_out_share}")
        if not 0.0 <= self.replay_share < 1.0:
            raise AdaptationError(f"--replay-share must lie in [0, 1), got {self.replay_share}")
        if self.replay_share > 0 and self.replay is None and not SAMPLE_REPLAY.is_dir():
            raise AdaptationError(f"--replay-share {self.replay_share}: the bundled sample ({SAMPLE_REPLAY}) is missing; "
                                  "give --replay MANIFEST or --replay-share 0")
        if self.lr <= 0 or self.encoder_lr_scale <= 0:
            raise AdaptationError(f"--lr and --encoder-lr-scale must be positive, got {self.lr}, {self.encoder_lr_scale}")
        if min(self.max_steps, self.validate_every, self.patience, self.batch_size, self.threads) < 1:
            raise AdaptationError("--max-steps, --validate-every, --patience, --batch-size and --threads must be >= 1")
        for name, path in (("source", self.source), ("base", self.base), ("replay", self.replay),
                           ("general", self.general)):
            if path is not None and not Path(path).exists():
                raise AdaptationError(f"{name}: not found: {path}")
        if Path(self.source).is_dir():
            expand_audio_paths([self.source])  # a folder without audio is one line before the run folder exists

    def as_json(self) -> dict:
        return {key: str(value) if isinstance(value, Path) else value for key, value in asdict(self).items()}


def _draw_order(entry: dict, seed: int) -> str:
    return hashlib.sha256(f"{seed}:{entry['audio_filepath']}".encode()).hexdigest()


def carve(entries: list[dict], share: float, seed: int = 0, minimum: int = 2) -> tuple[list[dict], list[dict]]:
    """(train, held out): ``share`` of ``entries`` (at least ``minimum`` each side) held out, chosen by a hash of each
    audio path and the seed, so the same utterances are held out whatever order they come in; both lists in input
    order, no utterance in both."""
    if len(entries) < 2 * minimum:
        raise AdaptationError(f"{len(entries)} usable utterances: adapting needs at least {2 * minimum} "
                              f"({minimum} to train on, {minimum} held out)")
    n_held = min(len(entries) - minimum, max(minimum, round(share * len(entries))))
    held_paths = {e["audio_filepath"] for e in sorted(entries, key=lambda e: _draw_order(e, seed))[:n_held]}
    return ([e for e in entries if e["audio_filepath"] not in held_paths],
            [e for e in entries if e["audio_filepath"] in held_paths])


def mix_replay(own: list[dict], replay: list[dict], share: float, seed: int = 0) -> list[dict]:
    """``own`` plus utterances drawn from ``replay`` (without repeats while it lasts) so that they make ``share`` of the
    result: ``round(len(own) * share / (1 - share))`` of them."""
    if share <= 0 or not replay:
        return list(own)
    wanted = round(len(own) * share / (1.0 - share))
    rng = random.Random(seed)
    drawn: list[dict] = []
    while len(drawn) < wanted:
        drawn += rng.sample(replay, min(len(replay), wanted - len(drawn)))
    return list(own) + drawn


def set_moving_parameters(model, moving: str) -> list:
    """Freeze everything but what ``moving`` names (:data:`MOVING`); returns the parameters that train. On an encoder
    without an added block (a FastConformer) "block" is its last layer."""
    encoder = model.encoder
    for p in model.parameters():
        p.requires_grad_(moving == "all")
    if moving == "all":
        return list(model.parameters())
    params = list(model.decoder.parameters())
    added = list(encoder.adapter_parameters()) if hasattr(encoder, "adapter_parameters") else []
    if moving in ("block", "last_layer"):
        params += added or list(encoder.layers[-1].parameters())
    if moving == "last_layer" and added:
        params += list(encoder.layers[-1].parameters())
        params += list(encoder.ln_post.parameters()) if hasattr(encoder, "ln_post") else []
    for p in params:
        p.requires_grad_(True)
    return params


def _data_config(manifest: Path, batch_size: int, shuffle: bool, sample_rate: int) -> dict:
    return {"manifest_filepath": str(manifest), "sample_rate": sample_rate, "batch_size": batch_size,
            "shuffle": shuffle, "num_workers": 0, "pin_memory": False, "min_duration": 0.1, "max_duration": 29.0}


class _ValidationLog(pl.Callback):
    """Every validation's (step, held-out WER), the base's first; from the second on, one console line each with the
    best so far marked (the base's included)."""

    def __init__(self, say: Callable[[str], None]):
        self.say = say
        self.rows: list[tuple[int, float]] = []

    def on_validation_end(self, trainer, pl_module):
        wer = trainer.callback_metrics.get("val_wer")
        if wer is None or trainer.sanity_checking:
            return
        wer = float(wer)
        if self.rows:
            mark = " (best)" if wer < min(w for _, w in self.rows) else ""
            self.say(f"  step {trainer.global_step}: held-out WER {100 * wer:.2f} %{mark}")
        self.rows.append((trainer.global_step, wer))


@dataclass
class FineTuneResult:
    model: object
    base_wer: float  # NeMo's greedy val_wer on the held-out part, before
    best_wer: float  # the same of the model handed back
    best_step: int | None  # None: no step beat the base, which is handed back
    steps_run: int
    validations: list[tuple[int, float]] = field(default_factory=list)


def fine_tune(model, train_manifest: Path, held_out_manifest: Path, settings: AdaptationSettings, run_dir: Path,
              say: Callable[[str], None] = print) -> FineTuneResult:
    """Fine-tune ``model`` in place with Lightning, validating on ``held_out_manifest`` every
    ``settings.validate_every`` steps; returns it holding the best validated weights, or its own weights when no
    validation beat them (NeMo's greedy ``val_wer`` decides)."""
    sample_rate = int(model.cfg.sample_rate)
    model.setup_training_data(OmegaConf.create(_data_config(train_manifest, settings.batch_size, True, sample_rate)))
    model.setup_validation_data(OmegaConf.create(_data_config(held_out_manifest, settings.batch_size, False,
                                                              sample_rate)))
    with open_dict(model.cfg):
        model.cfg.optim = {"name": "adamw", "lr": settings.lr, "betas": [0.9, 0.98], "weight_decay": 0.0}
    model.wer.log_prediction = False  # a reference/prediction pair per step would drown the progress lines
    moving = set_moving_parameters(model, settings.moving)
    if settings.moving == "all" and settings.encoder_lr_scale != 1.0:
        recipe.use_encoder_finetune(model, None, OmegaConf.create({"lr_scale": settings.encoder_lr_scale,
                                                                   "freeze_steps": 0}))
    history = _ValidationLog(say)
    checkpoint = ModelCheckpoint(dirpath=str(run_dir / "checkpoints"), filename="best", monitor="val_wer", mode="min",
                                 save_top_k=1, save_weights_only=True, enable_version_counter=False)
    stopping = EarlyStopping(monitor="val_wer", mode="min", patience=settings.patience, check_on_train_epoch_end=False)
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_steps=settings.max_steps, max_epochs=-1,
                         val_check_interval=settings.validate_every, check_val_every_n_epoch=None,
                         num_sanity_val_steps=0, logger=CSVLogger(str(run_dir), name="csv_logs", version=""),
                         log_every_n_steps=1, enable_progress_bar=False, enable_model_summary=False,
                         callbacks=[history, checkpoint, stopping])
    model.set_trainer(trainer)
    base_wer = float(trainer.validate(model, verbose=False)[0]["val_wer"])
    say(f"  base: held-out WER {100 * base_wer:.2f} %; training {sum(p.numel() for p in moving) / 1e6:.2f} M "
        f"parameters ({settings.moving}) for up to {settings.max_steps} steps")
    base_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    trainer.fit(model)
    validations = history.rows[1:]  # the first row is the base's validate()
    best_score = checkpoint.best_model_score
    if best_score is not None and float(best_score) < base_wer and checkpoint.best_model_path:
        state = torch.load(checkpoint.best_model_path, map_location="cpu", weights_only=False)["state_dict"]
        model.load_state_dict(state)
        best_step = min((step for step, wer in validations if wer == float(best_score)), default=None)
        best_wer = float(best_score)
    else:
        model.load_state_dict(base_state)
        best_step, best_wer = None, base_wer
    shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)  # the best step is what model.nemo holds
    for p in model.parameters():
        p.requires_grad_(True)
    model.eval()
    return FineTuneResult(model, base_wer, best_wer, best_step, trainer.global_step, validations)


def labelled_entries(settings: AdaptationSettings, out: Path, say: Callable[[str], None]) -> list[dict]:
    """The user's utterances with transcripts: a manifest's (text normalised as speech), or Whisper's pseudo-labels of
    the audio (what its confidence rule keeps; ``labels.skipped.tsv`` lists the rest)."""
    source = Path(settings.source)
    if source.is_file() and source.suffix == ".json":
        entries = [{**e, "text": normalize_spoken(e["text"])} for e in read_manifest(source)]
        entries = [e for e in entries if e["text"]]
        say(f"adapt: {len(entries)} transcribed utterances from {source}")
        return entries
    say(f"adapt: pseudo-labelling {source} with {settings.teacher}")
    summary = pseudo_label(PseudoLabelSettings(audio=(source,), out=out / "labels.json", teacher=settings.teacher,
                                               min_confidence=settings.min_confidence, threads=settings.threads))
    say(f"adapt: kept {summary['kept']} of {summary['files']} files ({60 * summary['kept_hours']:.1f} min); the rest "
        f"with reasons in {summary['skipped_list']}")
    return read_manifest(out / "labels.json")


def replay_entries(settings: AdaptationSettings) -> list[dict]:
    """The utterances replayed while adapting: ``settings.replay``'s, or the bundled sample's training speech."""
    if settings.replay is not None:
        return read_manifest(settings.replay)
    return build_split_manifest(SAMPLE_REPLAY).entries


def copy_decoding_file(base: Path, model_path: Path) -> Path | None:
    """The base's decoding.json beside the adapted model (its LM path, relative to the base's folder, made absolute
    so that it still points at the LM); None when the base has none."""
    source = decoding_file_for(base)
    if not source.is_file():
        return None
    decoding = json.loads(source.read_text(encoding="utf-8"))
    if decoding.get("lm"):
        decoding["lm"] = str((source.parent / decoding["lm"]).resolve())
    target = model_path.parent / DECODING_FILE_NAME
    write_text_atomic(target, json.dumps(decoding, indent=1) + "\n")
    return target


def greedy_wer(model, manifest: Path) -> float:
    return float(evaluation.evaluate_manifest(model, manifest, progress=False).summary["wer"])


def adapt(settings: AdaptationSettings, say: Callable[[str], None] = print) -> dict:
    """The whole adaptation (module docstring); returns the metrics written to ``<out>/metrics.json``."""
    settings.validate()
    start = time.time()
    torch.set_num_threads(settings.threads)
    out = Path(settings.out)
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / "settings.json", json.dumps(settings.as_json(), indent=2) + "\n")
    entries = labelled_entries(settings, out, say)
    train, held_out = carve(entries, settings.held_out_share, settings.seed)
    write_manifest(out / "train.json", train)
    write_manifest(out / "held_out.json", held_out)
    replay = replay_entries(settings) if settings.replay_share > 0 else []
    mixed = mix_replay(train, replay, settings.replay_share, settings.seed)
    write_manifest(out / "train_mix.json", mixed)
    minutes = lambda items: sum(e["duration"] for e in items) / 60  # noqa: E731
    say(f"adapt: {len(train)} utterances ({minutes(train):.1f} min) to train on"
        + (f" + {len(mixed) - len(train)} replayed" if len(mixed) > len(train) else "")
        + f", {len(held_out)} ({minutes(held_out):.1f} min) held out")
    pl.seed_everything(settings.seed, workers=True, verbose=False)
    model = load_asr_model(settings.base, device="cpu")
    general_before = greedy_wer(model, settings.general) if settings.general else None
    result = fine_tune(model, out / "train_mix.json", out / "held_out.json", settings, out, say)
    metrics = {"utterances": len(entries), "train": len(train), "held_out": len(held_out),
               "replayed": len(mixed) - len(train), "train_minutes": round(minutes(train), 2),
               "held_out_wer_before": round(result.base_wer, 4), "held_out_wer_after": round(result.best_wer, 4),
               "best_step": result.best_step, "steps_run": result.steps_run, "base_kept": result.best_step is None,
               "validations": [{"step": s, "wer": round(w, 4)} for s, w in result.validations]}
    if settings.general:
        metrics["general_wer_before"] = round(general_before, 4)
        metrics["general_wer_after"] = round(greedy_wer(result.model, settings.general), 4)
    model_path = out / "model.nemo"
    partial = out / "model.nemo.partial"
    result.model.save_to(str(partial))
    partial.replace(model_path)
    copy_decoding_file(Path(settings.base), model_path)
    metrics["model"] = str(model_path)
    metrics["wall_seconds"] = round(time.time() - start, 1)
    write_text_atomic(out / "metrics.json", json.dumps(metrics, indent=2) + "\n")
    return metrics


def summary_line(metrics: dict) -> str:
    """The run in one line: held-out WER before -> after (and the general set's), what was handed back."""
    kept = ("the base kept: no step beat it" if metrics["base_kept"]
            else f"step {metrics['best_step']} of {metrics['steps_run']}")
    general = (f"; general set {100 * metrics['general_wer_before']:.2f} -> {100 * metrics['general_wer_after']:.2f} %"
               if "general_wer_before" in metrics else "")
    return (f"adapt: held-out WER {100 * metrics['held_out_wer_before']:.2f} -> {100 * metrics['held_out_wer_after']:.2f} "
            f"% on {metrics['held_out']} utterances ({kept}){general}; {metrics['wall_seconds'] / 60:.1f} min -> "
            f"{metrics['model']}")
