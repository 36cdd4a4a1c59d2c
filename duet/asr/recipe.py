"""Steps of the NeMo CTC fine-tuning recipe (``nemo_recipes/finetune_ctc.py``).

Each step is a thin call into NeMo or Lightning: the trainer is Lightning's, the experiment folder
(checkpoints, resume, TensorBoard) is NeMo's ``exp_manager``, the model is NeMo's ``EncDecCTCModelBPE``.
What lives here is only the glue: hardware-dependent trainer defaults, choosing where the starting
weights come from, switching the tokenizer, and scoring the test manifest at the end.
"""

from __future__ import annotations

import csv
import json
import logging
import math
import os
import shutil
import statistics
import tempfile
import time
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Callable

import lightning.pytorch as pl
import sentencepiece as spm
import torch
from filelock import FileLock
from lightning.pytorch.accelerators import CPUAccelerator, CUDAAccelerator
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.utilities.exceptions import SIGTERMException
from omegaconf import DictConfig, ListConfig, OmegaConf, open_dict

from duet.asr import evaluation, scoring
from duet.asr.distillation import DistillationSettings, use_distillation
from duet.asr.inference import load_asr_model
from duet.errors import DuetError
from duet.data.manifest import make_manifest_command
from duet.foundation.progress import PLAIN_EVERY_S, duration
from duet.data.tokenizer import training_command
from duet.foundation import python_command
from duet.foundation.errors import first_line
from duet.foundation.files import read_jsonl, write_text_atomic
from slm.torch_build import require_torch_to_see_the_gpus

log = logging.getLogger(__name__)


class RecipeError(DuetError, ValueError):
    """A configuration or input problem the user can fix; the entry script prints it as one line."""


def requested_gpu_count(devices) -> int:
    """How many GPUs ``trainer.devices`` asks for, read by Lightning's own parser.

    ``None``/``"auto"`` = every visible GPU; ``-1``/``"-1"`` = all; ``2``/``"2"`` = two; ``"0,1"`` or
    ``[0, 1]`` = those indices. A string is never measured with ``len()`` (``"auto"`` is not four GPUs).
    """
    if devices is None or devices == "auto":
        return CUDAAccelerator.auto_device_count()
    return len(CUDAAccelerator.parse_devices(devices) or [])


def mixed_precision_for(cuda_capability: tuple[int, int] | None) -> str:
    """Lightning ``precision`` for a GPU of this compute capability (None = no GPU: fp32).

    bf16 only where the tensor cores run it natively (Ampere, capability 8.0, and later): V100 (7.0) and
    T4 (7.5) only emulate bf16, far slower than their fp16, so they get fp16 mixed precision (Lightning
    adds the loss scaler). ``torch.cuda.is_bf16_supported()`` counts emulation, so it cannot decide this.
    """
    if cuda_capability is None:
        return "32-true"
    return "bf16-mixed" if tuple(cuda_capability) >= (8, 0) else "16-mixed"


def loader_workers_for(cpu_count: int, processes_per_node: int, on_gpu: bool) -> int:
    """Data-loader workers per training process for a ``num_workers: null`` in the config.

    On GPU, FLAC decoding and feature extraction run in the workers and one would starve the GPU: the
    node's cores are shared by its processes, at most 8 each (more only adds start-up time and memory).
    On CPU the workers compete with training for the same few cores: one.
    """
    if not on_gpu:
        return 1
    return max(1, min(8, cpu_count // max(1, processes_per_node)))


def resolve_trainer_config(trainer_cfg: DictConfig) -> dict:
    """Lightning ``Trainer`` kwargs with every ``null`` hardware key filled in for this machine.

    GPU: all visible devices, DDP when there are several, bf16 mixed precision on GPUs that run it
    natively, fp16 mixed precision on older ones (:func:`mixed_precision_for`), synchronised batch norm.
    CPU: one process, fp32 (CPU DDP must be asked for explicitly, with ``sync_batchnorm=false``).
    Values set in the config or on the command line are kept. GPUs that ``nvidia-smi`` lists and torch cannot use
    are an error (``slm.torch_build.require_torch_to_see_the_gpus``) unless ``trainer.accelerator=cpu``.
    """
    resolved = OmegaConf.to_container(trainer_cfg, resolve=True)
    wants_gpu = resolved.get("accelerator") in (None, "auto", "gpu", "cuda")
    if wants_gpu:
        require_torch_to_see_the_gpus()  # a GPU machine whose torch cannot use them would train on the CPU
    if wants_gpu and torch.cuda.is_available():
        devices = resolved.get("devices")
        multi = requested_gpu_count(devices) * resolved.get("num_nodes", 1) > 1
        defaults = {
            "accelerator": "gpu",
            "devices": "auto" if devices is None else devices,
            "strategy": "ddp" if multi else "auto",
            "precision": mixed_precision_for(torch.cuda.get_device_capability()),
            "sync_batchnorm": multi,
        }
    else:
        defaults = {"accelerator": "cpu", "devices": 1, "strategy": "auto", "precision": "32-true", "sync_batchnorm": False}
    for key, value in defaults.items():
        if resolved.get(key) is None:
            resolved[key] = value
    if resolved["accelerator"] == "cpu" and resolved["sync_batchnorm"]:
        raise RecipeError("trainer.sync_batchnorm=true needs GPUs; use trainer.sync_batchnorm=false on CPU")
    return resolved


def fill_loader_workers(model_cfg: DictConfig, trainer) -> None:
    """Replace ``num_workers: null`` of the train/validation/test loaders with :func:`loader_workers_for`."""
    on_gpu = not isinstance(trainer.accelerator, CPUAccelerator)
    workers = loader_workers_for(os.cpu_count() or 1, trainer.num_devices, on_gpu)
    for split in ("train_ds", "validation_ds", "test_ds"):
        if model_cfg[split].get("num_workers", 0) is None:
            model_cfg[split].num_workers = workers


def build_trainer(cfg: DictConfig, callbacks: list[pl.Callback] = ()):
    """Lightning trainer plus NeMo's experiment folder; returns ``(trainer, log_dir)``.

    ``exp_manager`` adds the best-by-``val_wer`` and last checkpoints, TensorBoard logs and, with
    ``resume_if_exists``, points the trainer at ``last.ckpt`` of a previous run with the same name.
    A CSV logger and a gradient-norm callback are added for ``tools/plot_training.py``, and ``callbacks``.
    """
    # NeMo takes ~21 s to import: only the calls that use it pay for it
    from nemo.utils.exp_manager import exp_manager

    trainer = pl.Trainer(**resolve_trainer_config(cfg.trainer), callbacks=[GradNormLogger(), *callbacks])
    log_dir = Path(exp_manager(trainer, cfg.get("exp_manager"))).resolve()
    trainer.loggers = [*trainer.loggers, CSVLogger(save_dir=str(log_dir), name="csv_logs", version="")]
    return trainer, log_dir


class GradNormLogger(pl.Callback):
    """Logs the total L2 norm of the gradients (before clipping) as ``grad_norm``, per step and per epoch.

    One fused norm over all gradients: a norm per tensor read back one by one would stop the GPU once per
    parameter tensor on every step.
    """

    def on_before_optimizer_step(self, trainer, pl_module, optimizer):
        grads = [p.grad for p in pl_module.parameters() if p.grad is not None]
        if grads:
            pl_module.log("grad_norm", torch.nn.utils.get_total_norm(grads, norm_type=2.0), on_step=True, on_epoch=True)


def library_log_path(cfg: DictConfig) -> Path:
    """Where a run's library output goes without ``--verbose`` (NeMo's, Lightning's and OneLogger's lines, Python
    warnings: ``duet.foundation.files.library_output_to``): ``<exp_dir>/logs/finetune_ctc_<name>.log``. Outside the
    run folder, whose files exp_manager moves into ``run_<n>/`` when a run resumes; a rank that Lightning or torchrun
    launched besides local rank 0 writes its own (``...rank<n>.log``), so that no process truncates another's."""
    rank = int(os.environ.get("LOCAL_RANK", "0"))
    suffix = f".rank{rank}.log" if rank else ".log"
    return Path(cfg.exp_manager.exp_dir) / "logs" / f"finetune_ctc_{cfg.exp_manager.name}{suffix}"


def describe_data(cfg: DictConfig) -> str:
    """``manifests/train-clean.json (520 utterances, 0.62 h); validating on manifests/dev-clean.json`` (the hours
    where the manifests give durations)."""
    entries = [entry for path in train_manifests(cfg.model) for entry in read_jsonl(path)]
    hours = sum(float(entry.get("duration") or 0) for entry in entries) / 3600
    amount = f"{len(entries)} utterances" + (f", {hours:.2f} h" if hours else "")
    return (f"{', '.join(train_manifests(cfg.model))} ({amount}); validating on "
            f"{', '.join(manifest_items(cfg.model.validation_ds.manifest_filepath))}")


def describe_checkpoints(cfg: DictConfig) -> str:
    """When this run saves a checkpoint to resume from, as exp_manager's ``checkpoint_callback_params`` say."""
    params = cfg.exp_manager.get("checkpoint_callback_params") or {}
    times = [f"every {params.every_n_train_steps} steps" if params.get("every_n_train_steps") else None,
             "each epoch" if params.get("save_on_train_epoch_end") or params.get("every_n_epochs") else None]
    return " and ".join(t for t in times if t) or "at the end"


#: Said before training from scratch: what a user would otherwise take for a broken run.
SCRATCH_NOTE = ("training from scratch: a new CTC model predicts only blanks until it has learnt the tokens, so the "
                "validation WER stays at 100 % (empty predictions) for the first epochs, often many of them on a "
                "small data set; the training loss falling is the progress until then")


class ConsoleProgress(pl.Callback):
    """The run's own lines while NeMo's and Lightning's go to the log (``say`` prints one on the console): the epoch,
    the step of all of them, the loss and the time left at this run's own pace (``epoch 2/4, step 60/204 (29 %),
    loss 0.911, about 3 min left``) at the first step, then every ``every_s`` seconds; the validation WER after each
    validation; and, when Ctrl-C or SIGTERM stopped the training, what did (:attr:`interrupted`). Global rank 0
    only."""

    def __init__(self, say: Callable[[str], None], from_scratch: bool = False, every_s: float = PLAIN_EVERY_S):
        self.say, self.from_scratch, self.every_s = say, from_scratch, every_s
        self.interrupted: str | None = None  # "Ctrl-C" or "SIGTERM"
        self._start: tuple[int, float] | None = None  # (step, time) when this run's training began
        self._last_line: float | None = None
        self._loss: torch.Tensor | None = None  # the latest step's

    def on_train_start(self, trainer, pl_module):
        self._start = (trainer.global_step, time.monotonic())

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        self._loss = loss.detach() if isinstance(loss, torch.Tensor) else None  # read (a device sync) once a line
        now = time.monotonic()
        if trainer.is_global_zero and (self._last_line is None or now - self._last_line >= self.every_s):
            self._last_line = now
            self.say(self.progress_line(trainer, now))

    def progress_line(self, trainer, now: float) -> str:
        step, total = trainer.global_step, trainer.estimated_stepping_batches
        parts = [self.position(trainer) + (f" ({100 * step / max(1, total):.0f} %)" if math.isfinite(total) else "")]
        if self._loss is not None:
            parts.append(f"loss {float(self._loss):.3f}")
        first_step, since = self._start or (step, now)
        if math.isfinite(total) and step > first_step and now > since:
            parts.append(f"about {duration((total - step) * (now - since) / (step - first_step))} left")
        else:
            parts.append("time left: measuring the pace")
        return ", ".join(parts)

    def on_validation_end(self, trainer, pl_module):
        wer = trainer.callback_metrics.get("val_wer")
        if trainer.sanity_checking or not trainer.is_global_zero or wer is None:
            return
        note = ""
        if self.from_scratch and float(wer) >= 0.9999:
            note = " (expected while a model trained from scratch still predicts only blanks)"
        self.say(f"validation after {self.position(trainer)}: WER {100 * float(wer):.2f} %{note}")

    @staticmethod
    def position(trainer) -> str:
        """``epoch 2/4, step 60/204`` (``epoch 2, step 60`` where the run's length is not known)."""
        step, total = trainer.global_step, trainer.estimated_stepping_batches
        epochs = trainer.max_epochs if trainer.max_epochs and trainer.max_epochs > 0 else None
        return (f"epoch {trainer.current_epoch + 1}" + (f"/{epochs}" if epochs else "")
                + f", step {step}" + (f"/{int(total)}" if math.isfinite(total) else ""))

    def on_exception(self, trainer, pl_module, exception):
        if isinstance(exception, KeyboardInterrupt):
            self.interrupted = "Ctrl-C"
        elif isinstance(exception, SIGTERMException):
            self.interrupted = "SIGTERM"
        else:
            return
        # Lightning closes its progress bars at the end of training only: an interrupted one would be closed when
        # the process exits, onto the console; closed here, while its output still goes to the log
        bars = trainer.progress_bar_callback
        for name in ("train_progress_bar", "val_progress_bar"):
            with suppress(AttributeError, TypeError):  # no such bar, or not made yet (Lightning's TypeError)
                getattr(bars, name).close()


def last_checkpoint(log_dir: Path) -> tuple[Path, int] | None:
    """The checkpoint a re-run resumes from (exp_manager's newest ``*last.ckpt`` in ``log_dir/checkpoints`` that was
    written to the end: a save the interruption cut short is marked unfinished) and the step it holds; None before
    the first."""
    # NeMo takes ~21 s to import: only the calls that use it pay for it (a run has imported it already)
    from nemo.utils.callbacks import NeMoModelCheckpoint

    saved = [path for path in (Path(log_dir) / "checkpoints").glob("*last.ckpt")
             if not NeMoModelCheckpoint.is_checkpoint_unfinished(path)]
    if not saved:
        return None
    path = max(saved, key=lambda p: p.stat().st_mtime)
    # the step recorded in the file itself; mmap reads only that much of it
    return path, int(torch.load(path, map_location="cpu", mmap=True, weights_only=False)["global_step"])


def load_base_model(cfg: DictConfig, trainer):
    """The model to train: from ``init_from_nemo_model``, ``init_from_pretrained_model``, or from scratch.

    With neither key the architecture in ``cfg.model`` is built with random weights (how the bundled
    base checkpoint was made). Both keys set is an error. A pretrained name is fetched with NeMo's
    ``from_pretrained`` directly (no waiting for other ranks), so without internet it fails at once; see
    :func:`load_pretrained_model` for how its download is shared by the ranks.
    """
    # NeMo takes ~21 s to import: only the calls that use it pay for it
    from nemo.collections.asr.models import ASRModel, EncDecCTCModelBPE

    nemo_path = cfg.get("init_from_nemo_model")
    pretrained_name = cfg.get("init_from_pretrained_model")
    if nemo_path and pretrained_name:
        raise RecipeError(
            f"set only one of init_from_nemo_model ({nemo_path}) and init_from_pretrained_model ({pretrained_name})"
        )
    if nemo_path:
        if not Path(nemo_path).is_file():
            raise RecipeError(f"init_from_nemo_model: file not found: {nemo_path}")
        log.info("Fine-tuning %s", nemo_path)
        model = ASRModel.restore_from(str(nemo_path), trainer=trainer, map_location=torch.device("cpu"))
    elif pretrained_name:
        log.info("Fine-tuning pretrained model %s", pretrained_name)
        model = load_pretrained_model(pretrained_name, trainer)
    else:
        log.info("No init_from_* key: training %s from scratch", cfg.name)
        if cfg.model.tokenizer.dir is None:
            raise RecipeError("model.tokenizer.dir=null keeps a checkpoint's tokenizer; training from scratch "
                              f"needs a tokenizer folder ({python_command('tools/train_tokenizer.py')})")
        return EncDecCTCModelBPE(cfg=cfg.model, trainer=trainer)
    if not isinstance(model, EncDecCTCModelBPE):
        source = nemo_path or pretrained_name
        raise RecipeError(f"{source} is a {type(model).__name__}; this recipe fine-tunes EncDecCTCModelBPE models")
    return model


def load_pretrained_model(name: str, trainer):
    """``init_from_pretrained_model``: the model NeMo's ``from_pretrained`` resolves ``name`` to, restored on the CPU.

    NeMo downloads an NGC name straight to its cache file, so a cut download stays there and every later run reuses
    it, and each rank of a DDP run may read the file another is still writing. Here the download runs under
    :func:`locked_ngc_downloads` (one process downloads, to a temporary name renamed when complete; the others wait
    and reuse it), and a cached file that does not restore is named in a warning and fetched once more.
    """
    # NeMo takes ~21 s to import: only the calls that use it pay for it
    from nemo.collections.asr.models import ASRModel, EncDecCTCModelBPE
    from nemo.core.connectors.save_restore_connector import SaveRestoreConnector

    def fetch(stale: tuple | None = None) -> str:
        try:
            with locked_ngc_downloads(stale):
                return str(EncDecCTCModelBPE.from_pretrained(name, refresh_cache=stale is not None,
                                                             return_model_file=True))
        except Exception as e:  # noqa: BLE001 - NGC/HF failures arrive as many types; all mean "not available"
            raise RecipeError(f"init_from_pretrained_model={name}: could not download it ({first_line(e)}); without "
                              "internet give a local checkpoint with init_from_nemo_model=/path/to/model.nemo") from None

    def restore(model_file: str):
        connector = SaveRestoreConnector()
        if os.path.isdir(model_file):  # a hub repository that holds the model unpacked, as from_pretrained reads it
            connector.model_extracted_dir = model_file
        return ASRModel.restore_from(model_file, trainer=trainer, map_location=torch.device("cpu"),
                                     save_restore_connector=connector)

    model_file = fetch()
    try:
        return restore(model_file)
    except Exception as e:  # noqa: BLE001 - a truncated or corrupt file fails in tarfile, torch or yaml alike
        log.warning("init_from_pretrained_model=%s: the cached %s does not restore (%s); fetching it again",
                    name, model_file, first_line(e))
        stale = file_identity(model_file)
    model_file = fetch(stale)
    try:
        return restore(model_file)
    except Exception as e:  # noqa: BLE001 - as above
        raise RecipeError(f"init_from_pretrained_model={name}: {model_file} does not restore even when fetched again "
                          f"({first_line(e)}); give a local checkpoint with init_from_nemo_model=") from None


def file_identity(path: str) -> tuple | None:
    """What tells a file from its replacement: inode, size and modification time (None: no such file)."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_ino, found.st_size, found.st_mtime_ns


@contextmanager
def locked_ngc_downloads(stale: tuple | None = None):
    """While active, NeMo's NGC download (``maybe_download_from_cloud``, as ``from_pretrained`` calls it) takes a file
    lock beside the cache file, downloads with NeMo's own downloader into a temporary folder beside it and renames
    the file into place when complete. A process that waited for the lock finds the file and reuses it.

    A refresh (``from_pretrained(refresh_cache=True)``) downloads again only while the cache file is still the one
    identified by ``stale`` (:func:`file_identity`): when several ranks found the same broken file, the first one
    replaces it and the others reuse the replacement. Hub names (with a ``/``) go through huggingface_hub, which
    already locks and downloads to a temporary name.
    """
    # NeMo takes ~21 s to import: only the calls that use it pay for it
    from nemo.core.classes import common

    download = common.maybe_download_from_cloud

    def locked_download(url, filename, subfolder=None, cache_dir=None, refresh_cache=False):
        folder = Path(cache_dir, subfolder or "")  # from_pretrained always names its cache folder
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / filename
        with FileLock(str(target) + ".lock"):
            for leftover in folder.glob(f".{filename}.partial-*"):  # from a process killed mid-download
                shutil.rmtree(leftover, ignore_errors=True)
            if target.is_file() and (not refresh_cache or file_identity(str(target)) != stale):
                return download(url, filename, subfolder=subfolder, cache_dir=cache_dir)  # NeMo reuses it
            staging = Path(tempfile.mkdtemp(prefix=f".{filename}.partial-", dir=folder))
            try:
                fetched = download(url, filename, cache_dir=staging, refresh_cache=True)  # NeMo joins Paths
                if not fetched:
                    raise OSError(f"nothing downloaded from {url}{filename}")
                os.replace(fetched, target)
            finally:
                shutil.rmtree(staging, ignore_errors=True)
            return str(target)

    common.maybe_download_from_cloud = locked_download
    try:
        yield
    finally:
        common.maybe_download_from_cloud = download


# Model-level keys of the recipe config that shape training but live outside the architecture; a
# restored checkpoint brings its own values, which the config's replace (apply_training_settings).
TRAINING_KEYS = ("ctc_reduction", "skip_nan_grad", "log_prediction", "interctc")

# Encoder keys that tell architectures apart: a checkpoint differing in one is another model than the
# config's name says (e.g. a Conformer fine-tuned with --config-name fastconformer_small).
ARCHITECTURE_KEYS = ("subsampling", "subsampling_factor", "n_layers", "d_model", "conv_kernel_size")


def apply_training_settings(model, model_cfg: DictConfig) -> None:
    """Give a restored checkpoint the config's training keys (:data:`TRAINING_KEYS`).

    NeMo reads them only in the model's constructor, so each is applied the way that constructor does:
    the CTC loss is rebuilt with the config's ``ctc_reduction`` (and ``change_vocabulary`` later reads
    it from ``model.cfg``), the NaN-gradient flag and the intermediate CTC losses are set up again.
    A ``sample_rate`` other than the checkpoint's cannot be applied (its features were learnt at that
    rate): refused, naming both.
    """
    # NeMo takes ~21 s to import: only the calls that use it pay for it
    from nemo.collections.asr.losses.ctc import CTCLoss

    if model_cfg.get("sample_rate") is not None and model_cfg.sample_rate != model.cfg.get("sample_rate"):
        raise RecipeError(f"model.sample_rate={model_cfg.sample_rate}: the checkpoint was trained at "
                          f"{model.cfg.get('sample_rate')} Hz and cannot be fine-tuned at another rate")
    with open_dict(model.cfg):
        for key in TRAINING_KEYS:
            if key in model_cfg:
                model.cfg[key] = model_cfg[key]
    model.loss = CTCLoss(num_classes=model.decoder.num_classes_with_blank - 1, zero_infinity=True,
                         reduction=model.cfg.get("ctc_reduction", "mean_batch"))
    model.wer.log_prediction = bool(model.cfg.get("log_prediction", False))
    model.setup_optimization_flags()
    model.setup_interctc(decoder_name="decoder", loss_name="loss", wer_name="wer")


def encoder_differences(checkpoint_encoder: DictConfig, config_encoder: DictConfig) -> dict:
    """``{key: (checkpoint's, config's)}`` for the :data:`ARCHITECTURE_KEYS` on which they differ."""
    return {key: (checkpoint_encoder.get(key), config_encoder.get(key)) for key in ARCHITECTURE_KEYS
            if checkpoint_encoder.get(key) != config_encoder.get(key)}


def warn_if_other_architecture(model, cfg: DictConfig, warn: Callable[[str], None] = log.warning) -> dict:
    """Warn (``warn``: the recipe's console line) when the checkpoint's encoder is not the one ``--config-name``
    describes; return the differences.

    The checkpoint's architecture is what trains (the config's encoder section is ignored), so the run
    would carry a misleading name; the differences also go into ``finetune_summary.json``.
    """
    differences = encoder_differences(model.cfg.encoder, cfg.model.encoder)
    if differences:
        listed = ", ".join(f"{key} {ours} in the checkpoint, {theirs} in the config"
                           for key, (ours, theirs) in differences.items())
        warn(f"The checkpoint's encoder is not {cfg.name}'s ({listed}): the checkpoint's architecture is trained; "
             "pick the config that describes it (e.g. conformer_small for stt_en_conformer_ctc_small)")
    return differences


def _tokenizer_proto(tokenizer_dir: str | Path) -> bytes:
    model_file = Path(tokenizer_dir) / "tokenizer.model"
    if not model_file.is_file():
        raise RecipeError(f"model.tokenizer.dir: {model_file} not found (make it with tools/train_tokenizer.py)")
    return spm.SentencePieceProcessor(model_file=str(model_file)).serialized_model_proto()


def match_tokenizer(model, tokenizer_cfg: DictConfig, transfer_decoder: bool = True) -> dict | None:
    """Switch the model to the configured tokenizer when it differs from the checkpoint's one.

    ``tokenizer_cfg.dir`` null keeps the checkpoint's tokenizer (and its decoder) as they are.

    ``change_vocabulary`` rebuilds the CTC decoder (random init) and the loss for the new vocabulary,
    so it must run before training. With ``transfer_decoder`` the new decoder then starts from what the
    checkpoint's decoder knew (:func:`decoder_row_sources`). Returns None when nothing changed, else
    ``{"pieces": N, "copied": C, "composed": K}`` (rows copied / built from old pieces; 0/0 without transfer).
    """
    if tokenizer_cfg.dir is None:
        log.info("model.tokenizer.dir=null: keeping the checkpoint's tokenizer (%d pieces)",
                 model.tokenizer.vocab_size)
        return None
    new_proto = _tokenizer_proto(tokenizer_cfg.dir)
    current = getattr(getattr(model, "tokenizer", None), "tokenizer", None)
    if current is not None and hasattr(current, "serialized_model_proto") and current.serialized_model_proto() == new_proto:
        log.info("Checkpoint already uses the tokenizer in %s", tokenizer_cfg.dir)
        return None
    old_pieces = list(model.tokenizer.vocab) if transfer_decoder else None
    old_layer = model.decoder.decoder_layers[0]
    old_weight, old_bias = old_layer.weight.detach().clone(), old_layer.bias.detach().clone()
    log.info("Tokenizer differs from the checkpoint's: switching to %s", tokenizer_cfg.dir)
    model.change_vocabulary(new_tokenizer_dir=str(tokenizer_cfg.dir), new_tokenizer_type=tokenizer_cfg.type)
    new_pieces = list(model.tokenizer.vocab)
    if not transfer_decoder:
        return {"pieces": len(new_pieces), "copied": 0, "composed": 0}
    sources = decoder_row_sources(old_pieces, new_pieces)
    new_layer = model.decoder.decoder_layers[0]
    with torch.no_grad():
        for new_id, old_ids in enumerate(sources):
            if old_ids:
                new_layer.weight[new_id] = old_weight[old_ids].mean(dim=0)
                new_layer.bias[new_id] = old_bias[old_ids].mean()
        new_layer.weight[-1], new_layer.bias[-1] = old_weight[-1], old_bias[-1]  # CTC blank is the last class
    copied = len(set(new_pieces) & set(old_pieces))
    composed = sum(bool(ids) for ids in sources) - copied
    log.info("Decoder rows from the checkpoint: %d of %d pieces copied, %d averaged from the old pieces that spell "
             "them, %d random", copied, len(new_pieces), composed, len(new_pieces) - copied - composed)
    return {"pieces": len(new_pieces), "copied": copied, "composed": composed}


def decoder_row_sources(old_pieces: list[str], new_pieces: list[str]) -> list[list[int]]:
    """For each new piece, the old piece ids whose CTC output rows start it off (empty: keep the random row).

    A piece both vocabularies share keeps its old row. Any other piece is spelled with old pieces by
    greedy longest match (``"▁degrees"`` -> ``"▁de" "gre" "es"``) and starts as the mean of their rows,
    so it fires roughly where the checkpoint emitted its parts. ``change_vocabulary`` alone starts
    every row at random, which a short fine-tune on little audio does not win back.
    """
    old_index = {piece: i for i, piece in enumerate(old_pieces)}
    longest = max(map(len, old_pieces), default=0)
    sources = []
    for piece in new_pieces:
        if piece in old_index:
            sources.append([old_index[piece]])
            continue
        ids, start = [], 0
        while start < len(piece):
            for end in range(min(len(piece), start + longest), start, -1):
                if piece[start:end] in old_index:
                    ids.append(old_index[piece[start:end]])
                    start = end
                    break
            else:  # a character the old vocabulary never had: no sensible start for this row
                ids = []
                break
        sources.append(ids)
    return sources


def missing_values(cfg, prefix: str = "") -> list[str]:
    """The dotted keys of ``cfg`` whose value is ``???``, in config order. (``OmegaConf.missing_keys`` fails on an
    interpolation of a missing value, such as ctc_base's ``exp_manager.name: ${name}``: those are left alone.)"""
    keys = []
    for key in cfg.keys() if isinstance(cfg, DictConfig) else range(len(cfg)):
        name = f"{prefix}{key}" if isinstance(cfg, DictConfig) else f"{prefix[:-1]}[{key}]"
        node = cfg._get_node(key)
        if node._is_interpolation():
            continue
        if node._is_missing():
            keys.append(name)
        elif isinstance(node, (DictConfig, ListConfig)) and not node._is_none():
            keys += missing_values(node, f"{name}.")
    return keys


def check_required_values(cfg: DictConfig) -> None:
    """Every ``???`` (a value the user must give) of the config, named in one error before anything runs: Hydra
    itself fails only where the first one is read, with a traceback."""
    missing = missing_values(cfg)
    if missing:
        given = " ".join(f"{key}=..." for key in missing)
        raise RecipeError(f"missing required value{'s' * (len(missing) > 1)} {', '.join(missing)}: "
                          f"add {given} to the command")


def manifest_items(path) -> list[str]:
    """The manifests a ``manifest_filepath`` names: NeMo reads a comma-separated string (or a list) of manifests
    as one concatenated dataset."""
    if path is None:
        return []
    return [item for item in (path.split(",") if isinstance(path, str) else map(str, path)) if item]


def _check_manifest(key: str, path) -> None:
    for item in manifest_items(path):
        if not Path(item).is_file():
            command = make_manifest_command(item)  # the defaults are what it writes from the bundled sample
            raise RecipeError(f"{key}: manifest not found: {item}" + (f" (run {command} first)" if command else ""))


def train_manifests(model_cfg: DictConfig) -> list[str]:
    """Every training manifest: ``train_ds.manifest_filepath`` or, with Lhotse's weighted sources, theirs."""
    sources = [source.get("manifest_filepath") for source in model_cfg.train_ds.get("input_cfg") or []]
    return [item for path in [model_cfg.train_ds.manifest_filepath, *sources] for item in manifest_items(path)]


def check_inputs(cfg: DictConfig) -> None:
    """Before anything is built: the manifests (:func:`check_manifests`), the tokenizer folder and the
    ``init_from_nemo_model`` file exist; a missing one is one error naming the command that makes it."""
    check_manifests(cfg.model)
    tokenizer_dir = cfg.model.tokenizer.dir
    if tokenizer_dir is not None and not (Path(tokenizer_dir) / "tokenizer.model").is_file():
        command = training_command(tokenizer_dir, train_manifests(cfg.model))
        how = (f"run {command} first" if command else
               f"make one with {python_command('tools/train_tokenizer.py')} (it writes tokenizers/spe_<type>_v<size>) "
               "and point model.tokenizer.dir at it")
        raise RecipeError(f"model.tokenizer.dir: no tokenizer in {tokenizer_dir} ({how})")
    nemo_path = cfg.get("init_from_nemo_model")
    if nemo_path and not Path(nemo_path).is_file():
        raise RecipeError(f"init_from_nemo_model: file not found: {nemo_path}")
    teacher = distillation_settings(cfg.distillation).teacher
    if teacher and not Path(teacher).is_file():
        raise RecipeError(f"distillation.teacher: file not found: {teacher}")


def check_manifests(model_cfg: DictConfig) -> None:
    """Every manifest (and noise list) the config names exists; before any model is built, because a model
    built from scratch sets up its loaders in NeMo's constructor, which fails with a traceback."""
    _check_manifest("model.train_ds.manifest_filepath", model_cfg.train_ds.manifest_filepath)
    for i, source in enumerate(model_cfg.train_ds.get("input_cfg") or []):  # Lhotse's weighted sources
        _check_manifest(f"model.train_ds.input_cfg[{i}].manifest_filepath", source.get("manifest_filepath"))
    _check_manifest("model.validation_ds.manifest_filepath", model_cfg.validation_ds.manifest_filepath)
    _check_manifest("model.test_ds.manifest_filepath", model_cfg.test_ds.get("manifest_filepath"))
    _check_manifest("model.train_ds.noise_path", model_cfg.train_ds.get("noise_path"))


#: Training speed on CPU in multiples of real time (audio seconds trained per second), measured at batch 16 with
#: the recipe's defaults on this project's 2-core machines: fastconformer_small (12.8 M parameters) 6x,
#: fastconformer_tiny (3.3 M) 20x. Other sizes: the power law through the two.
CPU_TRAINING_SPEED = ((12.8e6, 6.0), (3.3e6, 20.0))
#: Encoders whose speed the FastConformer law does not tell, by class name: the Whisper-encoder recipe
#: (whisper_tiny_ctc, 9.1 M parameters) trained base v6's 1,200 steps of 80 s batches in 33.8 min at two threads.
CPU_TRAINING_SPEED_BY_ENCODER = {"WhisperEncoder": 47.0}


def cpu_training_speed(parameters: int, encoder_target: str | None = None) -> float:
    """Estimated multiple of real time at which a model of ``parameters`` (its encoder's ``_target_``, when known)
    trains on a 2-core CPU."""
    measured = CPU_TRAINING_SPEED_BY_ENCODER.get((encoder_target or "").rsplit(".", 1)[-1])
    if measured:
        return measured
    (big, big_speed), (small, small_speed) = CPU_TRAINING_SPEED
    exponent = math.log(small_speed / big_speed) / math.log(big / small)
    return big_speed * (big / parameters) ** exponent


def _duration(hours: float) -> str:
    if hours * 60 < 1:
        return "under a minute"
    return f"about {hours * 60:.0f} min" if hours < 1 else f"about {hours:.1f} h"


def cpu_cost_line(parameters: int, model_cfg: DictConfig, trainer_cfg: DictConfig) -> str | None:
    """One line on what this run costs on the CPU and how to shorten it; None when it cannot be told (Lhotse's
    endless sampling without max_steps, or manifests without durations)."""
    try:
        durations = [float(entry["duration"]) for path in train_manifests(model_cfg) for entry in read_jsonl(path)]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not durations:
        return None
    train_ds = model_cfg.train_ds
    step_audio = train_ds.get("batch_duration") or (train_ds.batch_size or 1) * sum(durations) / len(durations)
    max_steps, epochs = int(trainer_cfg.get("max_steps") or -1), trainer_cfg.get("max_epochs")
    epoch_audio = sum(durations)
    if max_steps > 0:
        audio, what = max_steps * step_audio, f"{max_steps} steps"
        if epochs is not None and epochs > 0 and not train_ds.get("use_lhotse"):
            audio = min(audio, epochs * epoch_audio)
    elif epochs is not None and epochs > 0 and not train_ds.get("use_lhotse"):
        audio, what = epochs * epoch_audio, f"{epochs} epochs of {epoch_audio / 3600:.2f} h of audio"
    else:
        return None
    speed = cpu_training_speed(parameters, model_cfg.get("encoder", {}).get("_target_"))
    step = (f"{train_ds.batch_duration:g} s of audio" if train_ds.get("batch_duration")
            else f"{train_ds.batch_size} utterances")
    return (f"no GPU: this {parameters / 1e6:.1f} M-parameter model trains at about {speed:.0f}x real time on a "
            f"2-core CPU, so {what} take {_duration(audio / speed / 3600)} (validation not counted); shorten the run "
            f"with trainer.max_steps=N (a step is {step}) or trainer.max_epochs=N")


def setup_data_and_training(model, model_cfg: DictConfig) -> None:
    """Data loaders, SpecAugment and optimizer settings from the recipe config (checkpoint's are replaced).

    The optimizer itself is built by Lightning's ``configure_optimizers`` from ``model.cfg.optim``,
    after the train loader exists (the schedulers need the number of steps).
    """
    model.setup_training_data(model_cfg.train_ds)
    lhotse = model_cfg.train_ds.get("use_lhotse", False)  # Lhotse datasets have no length: it samples endlessly
    if model._train_dl is None or (not lhotse and len(model._train_dl.dataset) == 0):
        raise RecipeError(
            f"model.train_ds: no usable utterance in {model_cfg.train_ds.manifest_filepath} "
            f"(durations must lie in [{model_cfg.train_ds.min_duration}, {model_cfg.train_ds.max_duration}] s)"
        )
    model.setup_multiple_validation_data(model_cfg.validation_ds)
    if model_cfg.test_ds.get("manifest_filepath"):
        model.setup_multiple_test_data(model_cfg.test_ds)
    # NeMo takes ~21 s to import: only the calls that use it pay for it
    from nemo.collections.asr.models import ASRModel

    with open_dict(model.cfg):
        model.cfg.spec_augment = model_cfg.spec_augment
        model.cfg.optim = model_cfg.optim
    # NeMo's CTC models apply the module stored as `spec_augmentation` (not `spec_augment`).
    model.spec_augmentation = ASRModel.from_config_dict(model_cfg.spec_augment) if model_cfg.spec_augment else None


@contextmanager
def training_layout(model, trainer):
    """During ``fit`` on CPU, keep 4-D weights channels-last (NHWC); back to the default layout afterwards.

    oneDNN runs FastConformer's 2-D subsampling convolutions, forward and backward, much faster on NHWC
    tensors on CPU (bench/asr_speed.py, training rows). Every rank runs this, so DDP ranks agree on the
    layout; on GPU nothing changes.
    """
    on_cpu = isinstance(trainer.accelerator, CPUAccelerator)
    if on_cpu:
        model.to(memory_format=torch.channels_last)
    try:
        yield
    finally:
        if on_cpu:
            model.to(memory_format=torch.contiguous_format)


def pretrained_encoder_parameters(model) -> list:
    """The encoder parameters that came from a pretrained model: the encoder's own ``pretrained_parameters()``
    where it tells them apart (Whisper's encoder with adapter blocks), else all of the encoder's."""
    chooser = getattr(model.encoder, "pretrained_parameters", None)
    return list(chooser()) if chooser else list(model.encoder.parameters())


def use_encoder_finetune(model, trainer, settings: DictConfig) -> dict:
    """Apply ``encoder_finetune``: a lower learning rate for the pretrained encoder weights and/or keeping
    them frozen for the first ``freeze_steps`` optimizer steps. Returns what was applied (for the summary).

    The learning rate goes through NeMo's own hook: ``setup_optimizer_param_groups`` (called by
    ``configure_optimizers``) is replaced on this model by one that puts those weights in a second parameter
    group whose ``lr`` is scaled; NeMo's schedulers scale every group's base rate alike.
    """
    lr_scale, freeze_steps = float(settings.lr_scale), int(settings.freeze_steps)
    if lr_scale <= 0 or freeze_steps < 0:
        raise RecipeError(f"encoder_finetune: lr_scale must be > 0 and freeze_steps >= 0, got {lr_scale}, {freeze_steps}")
    pretrained = pretrained_encoder_parameters(model)
    if lr_scale != 1.0:
        pretrained_ids = {id(p) for p in pretrained}

        def param_groups():
            rest = [p for p in model.parameters() if id(p) not in pretrained_ids]
            model._optimizer_param_groups = [{"params": rest},
                                             {"params": pretrained, "lr": float(model.cfg.optim.lr) * lr_scale}]

        model.setup_optimizer_param_groups = param_groups
    if freeze_steps:
        trainer.callbacks.append(FreezeForFirstSteps(pretrained, freeze_steps))
    return {"lr_scale": lr_scale, "freeze_steps": freeze_steps, "pretrained_parameters": sum(p.numel() for p in pretrained)}


def distillation_settings(settings: DictConfig) -> DistillationSettings:
    """The ``distillation`` keys, checked (a bad weight, temperature or ``targets`` is an error naming it)."""
    return DistillationSettings(**OmegaConf.to_container(settings, resolve=True))


def use_teacher(model, trainer, settings: DictConfig) -> dict | None:
    """Apply ``distillation``: restore the teacher ``.nemo`` on the CPU (the callback moves it to the training
    device) and add its term to the model's CTC loss (:func:`duet.asr.distillation.use_distillation`). None without
    a teacher; else what was applied (for the summary). Call after :func:`match_tokenizer`: the student's
    vocabulary decides how the teacher's outputs map onto it."""
    # NeMo takes ~21 s to import: only the calls that use it pay for it
    from nemo.collections.asr.models import EncDecCTCModel

    checked = distillation_settings(settings)
    if not checked.teacher:
        return None
    if list(model.cfg.get("interctc", {}).get("loss_weights", []) or []):
        # NeMo calls model.loss once per intermediate layer too: the teacher's term would be added each time
        raise RecipeError("distillation.teacher with model.interctc: not supported (NeMo computes the intermediate "
                          "CTC losses with the same loss, so the teacher term would count once per layer)")
    teacher = load_asr_model(checked.teacher, device="cpu")
    if not isinstance(teacher, EncDecCTCModel) or not hasattr(teacher, "tokenizer"):
        raise RecipeError(f"distillation.teacher: {checked.teacher} is a {type(teacher).__name__}; the teacher must be "
                          "a CTC model with a tokenizer (EncDecCTCModelBPE)")
    return use_distillation(model, trainer, teacher, checked)


class FreezeForFirstSteps(pl.Callback):
    """``requires_grad`` off for ``parameters`` until ``steps`` optimizer steps have run (a resumed run past
    them trains them at once)."""

    def __init__(self, parameters: list, steps: int):
        self.parameters, self.steps = parameters, steps
        self._frozen: bool | None = None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        frozen = trainer.global_step < self.steps
        if frozen != self._frozen:
            for p in self.parameters:
                p.requires_grad_(not frozen)
            self._frozen = frozen
            log.info("Pretrained encoder weights %s at step %d", "frozen" if frozen else "training", trainer.global_step)


def leave_distributed(trainer) -> None:
    """After ``fit``: wait for every rank, then drop the process group so rank 0 can save and evaluate alone.

    NeMo's ConformerEncoder all-reduces its positional-encoding length over the ranks whenever a process
    group exists, so a rank-0-only forward pass would wait forever for ranks that have already left.
    """
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        trainer.strategy.barrier()
        torch.distributed.destroy_process_group()


def save_model(model, log_dir: Path, name: str) -> Path:
    """Save the final ``.nemo`` (NeMo writes it from global rank 0 only)."""
    path = log_dir / f"{name}.nemo"
    model.save_to(str(path))
    return path


def evaluation_device(trainer) -> torch.device:
    """Where the recipe scores the test set: this process's training device (its GPU), else the CPU.

    The base model is restored to the CPU and Lightning's teardown moves it back there after ``fit``,
    so without this a GPU run would transcribe the whole test set on the CPU.
    """
    if isinstance(trainer.accelerator, CPUAccelerator):
        return torch.device("cpu")
    return trainer.strategy.root_device


def evaluate_test_set(model, manifest: str, log_dir: Path, tag: str, batch_size: int,
                      device: torch.device | str = "cpu") -> dict:
    """Transcribe the test manifest on ``device``, write ``<tag>_utterances.jsonl`` / ``<tag>_summary.json``;
    return the summary. The model goes back to the device it came from afterwards."""
    home = next(model.parameters()).device
    model.to(device)
    try:
        scored = evaluation.evaluate_manifest(model, manifest, batch_size=batch_size, progress=False)
    finally:
        model.to(home)
    _, summary_path = scoring.write_results(scored, log_dir, tag)
    s = scored.summary
    log.info("%s: WER %.2f%% CER %.2f%% on %d utterances on %s -> %s", tag, 100 * s["wer"], 100 * s["cer"],
             s["utterances"], device, summary_path)
    return s


def saved_test_summary(log_dir: Path, tag: str, manifest: str) -> dict | None:
    """The ``<tag>_summary.json`` an earlier attempt of this run wrote for ``manifest``, if any."""
    path = Path(log_dir) / f"{tag}_summary.json"
    if not path.is_file():
        return None
    summary = json.loads(path.read_text(encoding="utf-8"))
    return summary if summary.get("manifest") == str(manifest) else None


def score_before_fit(model, trainer, manifest: str, log_dir: Path, batch_size: int) -> dict:
    """The base model's test score: scored once per run; a resumed run reuses what its first attempt wrote.

    A resumed run (exp_manager found ``last.ckpt``) started from the same checkpoint, so its score
    cannot have changed. Called on global rank 0 only: the other ranks go on into ``fit`` and wait
    there for rank 0 to join the process group.
    """
    if trainer.ckpt_path is not None:
        saved = saved_test_summary(log_dir, "test_before", manifest)
        if saved is not None:
            log.info("test_before: reusing %s/test_before_summary.json from this run's first attempt", log_dir)
            return saved
    return evaluate_test_set(model, manifest, log_dir, "test_before", batch_size, evaluation_device(trainer))


def write_resolved_config(cfg: DictConfig, log_dir: Path) -> Path:
    """The full config of this run, every interpolation resolved, as ``<log_dir>/resolved_config.yaml``."""
    path = log_dir / "resolved_config.yaml"
    write_text_atomic(path, OmegaConf.to_yaml(cfg, resolve=True))
    return path


def write_run_summary(log_dir: Path, summary: dict) -> Path:
    path = log_dir / "finetune_summary.json"
    write_text_atomic(path, json.dumps(summary, indent=2) + "\n")
    return path


def median_step_seconds(log_dir: Path) -> float | None:
    """Median of NeMo's ``train_step_timing`` (exp_manager ``log_step_timing``) from the run's CSV log."""
    values = []
    for metrics in Path(log_dir).glob("csv_logs/**/metrics.csv"):
        with open(metrics, newline="") as f:
            for row in csv.DictReader(f):
                for key, value in row.items():
                    if key.startswith("train_step_timing") and value:
                        values.append(float(value))
    return statistics.median(values) if values else None
