r"""Fine-tune (or train from scratch) a NeMo CTC speech recogniser (EncDecCTCModelBPE) with Hydra configs.

Usage:
  # after python tools/make_manifest.py and python tools/train_tokenizer.py (their default outputs are the
  # recipe's default manifests/train-clean.json, manifests/dev-clean.json and tokenizers/spe_bpe_v1024)
  python nemo_recipes/finetune_ctc.py --config-name fastconformer_small
  python nemo_recipes/finetune_ctc.py --config-name fastconformer_small \
      init_from_nemo_model=samples/checkpoints/fastconformer_tiny_base.nemo \
      model.train_ds.manifest_filepath=manifests/train-clean-100.json \
      model.validation_ds.manifest_filepath=manifests/dev-clean.json \
      model.test_ds.manifest_filepath=manifests/test-clean.json \
      model.tokenizer.dir=tokenizers/spe_bpe_v1024 trainer.max_epochs=10

  Configs live in configs/ (fastconformer_small, conformer_small, fastconformer_tiny); any key can be
  overridden as key=value, unknown keys are errors. A value the config leaves as ??? and a manifest,
  tokenizer or checkpoint that does not exist are one-line errors naming what to give or the command that
  makes it, before anything loads. The model comes from init_from_nemo_model (a .nemo
  file), init_from_pretrained_model (an NGC/HF name: downloaded on first use, then read from
  $NEMO_CACHE_DIR) or, with neither, is trained from scratch (add asr_optim=noam_scratch for the
  report's schedule). If model.tokenizer.dir differs from the checkpoint's tokenizer the vocabulary is
  switched before training; model.tokenizer.dir=null keeps the checkpoint's own. A checkpoint keeps its
  architecture (a warning names the encoder keys where it differs from the config's); the config's
  ctc_reduction, skip_nan_grad, log_prediction and interctc apply.

  Distillation: distillation.teacher=<teacher.nemo> adds a frozen teacher's term to the CTC loss
  (distillation.weight, .temperature, .targets: the teacher's greedy transcripts as a second CTC target, or its
  frame posteriors where the vocabularies match; duet/asr/distillation.py). The teacher is not saved with the model.

  Hardware (trainer.* and num_workers left null): every visible GPU with DDP, bf16 mixed precision
  where the GPU runs it natively (else fp16), min(8, cores / GPUs) loader workers per process; on CPU one
  process in fp32 with one worker, and a line saying what the run costs there and how to shorten it
  (trainer.max_steps=N). The test set is scored on the training device by global rank 0
  (before training, while the other ranks wait to start; a resumed run reuses its first score).

  Outputs in experiments/<name>/ (exp_manager.exp_dir): resolved_config.yaml, checkpoints/ (best by val_wer, last),
  <name>.nemo, TensorBoard and csv_logs/, test_before_/test_after_{summary.json,utterances.jsonl},
  finetune_summary.json. Re-running the same command resumes a killed run from its last checkpoint, saved every
  exp_manager.checkpoint_callback_params.every_n_train_steps steps and at each epoch's end; Ctrl-C or SIGTERM
  stops the run with a line saying where it stopped and the command that resumes it (exit 130 / 143).

  The console shows the run's own lines: what it trains from and where it writes, a progress line (epoch, step
  of all, loss, time left) at least twice a minute, the validation WER after each validation, the test WER
  before and after. NeMo's, Lightning's and OneLogger's log lines (the config and optimizer dumps, the progress
  bar, warnings) go to experiments/logs/finetune_ctc_<name>.log (under exp_manager.exp_dir), or with --verbose
  (given anywhere on the command line) to standard error.
"""

import logging
import shlex
import sys
import time

import hydra
import lightning.pytorch as pl
from lightning.pytorch.accelerators import CPUAccelerator
from omegaconf import DictConfig, OmegaConf

import duet.nemo_targets
from duet.asr import recipe
from duet.foundation import python_command
from duet.foundation.errors import cli
from duet.foundation.files import library_output_to

log = logging.getLogger("finetune_ctc")
#: Not a Hydra override: taken off the command line before Hydra reads it (``main`` below).
VERBOSE_FLAG = "--verbose"
#: Whether NeMo's and Lightning's lines go to standard error (--verbose) instead of the run's library log.
show_library_output = False
#: Exit codes of a run stopped by Ctrl-C and by SIGTERM (a shell's 128 + the signal's number).
INTERRUPTED_EXIT = {"Ctrl-C": 130, "SIGTERM": 143}


duet.nemo_targets.install()  # lets NeMo build duet's encoders (ResMHA, Whisper) named in a config or a .nemo


@hydra.main(version_base=None, config_path="../configs", config_name="fastconformer_small")
def main(cfg: DictConfig) -> None:
    sys.exit(fit(cfg))


@cli
def fit(cfg: DictConfig) -> int:
    """``run`` for the command line: 0, 2 after a one-line error, 130 / 143 after Ctrl-C / SIGTERM."""
    summary = run(cfg)
    return INTERRUPTED_EXIT.get(summary.get("interrupted"), 0)


def run(cfg: DictConfig) -> dict:
    start = time.time()
    # what the user must give or make first: one line each, before NeMo and Lightning print anything
    recipe.check_required_values(cfg)
    OmegaConf.resolve(cfg)
    recipe.check_inputs(cfg)
    library_log = None if show_library_output else recipe.library_log_path(cfg)
    with library_output_to(library_log) as (console, _):
        return train(cfg, start, lambda text: print(f"finetune_ctc: {text}", file=console, flush=True), library_log)


def train(cfg: DictConfig, start: float, say, library_log) -> dict:
    """The run, its own lines given to ``say`` (global rank 0's), everything else printed going to ``library_log``."""
    from_checkpoint = bool(cfg.init_from_nemo_model or cfg.init_from_pretrained_model)
    progress = recipe.ConsoleProgress(say, from_scratch=not from_checkpoint)
    pl.seed_everything(cfg.seed, workers=True)
    trainer, log_dir = recipe.build_trainer(cfg, callbacks=[progress])
    if trainer.is_global_zero:
        log.info("Resolved config: %s", recipe.write_resolved_config(cfg, log_dir))
        source = (f"fine-tuning {cfg.init_from_nemo_model or cfg.init_from_pretrained_model}" if from_checkpoint
                  else f"training from scratch (the architecture of {cfg.name})")
        say(f"{cfg.name}: {source} on {recipe.describe_data(cfg)}")
        say(f"writing {log_dir} (checkpoints {recipe.describe_checkpoints(cfg)})"
            + (f"; NeMo's and Lightning's log: {library_log}" if library_log else ""))
        if trainer.ckpt_path:
            say(f"resuming from {trainer.ckpt_path}")
    recipe.fill_loader_workers(cfg.model, trainer)
    model = recipe.load_base_model(cfg, trainer)
    if trainer.is_global_zero and isinstance(trainer.accelerator, CPUAccelerator):
        cost = recipe.cpu_cost_line(sum(p.numel() for p in model.parameters()), cfg.model, cfg.trainer)
        if cost:
            say(cost)
    if trainer.is_global_zero and not from_checkpoint:
        say(recipe.SCRATCH_NOTE)
    test_manifest = cfg.model.test_ds.manifest_filepath
    summary = {"name": cfg.name, "log_dir": str(log_dir), "from_checkpoint": from_checkpoint}
    test_bs = cfg.model.test_ds.batch_size
    if from_checkpoint:
        summary["architecture_differences"] = recipe.warn_if_other_architecture(model, cfg, warn=say)
        recipe.apply_training_settings(model, cfg.model)
    if from_checkpoint and test_manifest and cfg.evaluate_before_fit and trainer.is_global_zero:
        summary["test_before"] = recipe.score_before_fit(model, trainer, test_manifest, log_dir, test_bs)
        say(f"test WER before training {100 * summary['test_before']['wer']:.2f} % ({test_manifest})")
    if from_checkpoint:
        transfer = recipe.match_tokenizer(model, cfg.model.tokenizer, cfg.transfer_decoder)
        summary["vocabulary_changed"], summary["decoder_transfer"] = transfer is not None, transfer
    recipe.setup_data_and_training(model, cfg.model)
    summary["encoder_finetune"] = recipe.use_encoder_finetune(model, trainer, cfg.encoder_finetune)
    summary["distillation"] = recipe.use_teacher(model, trainer, cfg.distillation)
    try:
        with recipe.training_layout(model, trainer):
            trainer.fit(model)
    except BaseException:  # Lightning leaves fit with exit(1) after Ctrl-C and with SIGTERMException after SIGTERM
        if progress.interrupted is None or not trainer.is_global_zero:
            raise
        # anything else raised while Lightning wound down after the interruption (one cut short mid-save) goes to
        # the log only: the line below is what the user needs
        log.warning("raised while stopping after %s:", progress.interrupted, exc_info=True)
        say_where_it_stopped(trainer, log_dir, progress.interrupted, say)
        return {**summary, "interrupted": progress.interrupted}
    recipe.leave_distributed(trainer)
    if not trainer.is_global_zero:
        return summary
    say(f"training done at step {trainer.global_step}: saving the model"
        + (" and scoring the test set" if test_manifest else ""))
    summary["model"] = str(recipe.save_model(model, log_dir, cfg.name))
    summary["global_step"] = trainer.global_step
    if test_manifest:
        summary["test_after"] = recipe.evaluate_test_set(model, test_manifest, log_dir, "test_after", test_bs,
                                                         recipe.evaluation_device(trainer))
    summary["wall_seconds"] = round(time.time() - start, 1)
    recipe.write_run_summary(log_dir, summary)
    wer = lambda key: f"{100 * summary[key]['wer']:.2f}%" if key in summary else "n/a"  # noqa: E731
    say(f"{cfg.name} done in {summary['wall_seconds'] / 60:.1f} min, {trainer.global_step} steps; "
        f"test WER before {wer('test_before')} -> after {wer('test_after')}; model {summary['model']}")
    return summary


def say_where_it_stopped(trainer, log_dir, interrupted: str, say) -> None:
    """Where an interrupted run stopped, the checkpoint a re-run resumes from, and that command (this one again)."""
    saved = recipe.last_checkpoint(log_dir)
    kept = (f"a re-run resumes from step {saved[1]} ({saved[0]})" if saved
            else "no checkpoint saved yet: a re-run starts afresh")
    command = python_command(sys.argv[0], *map(shlex.quote, sys.argv[1:]))
    say(f"stopped by {interrupted} at step {trainer.global_step}, epoch {trainer.current_epoch + 1}; {kept}; "
        f"resume with: {command}")


if __name__ == "__main__":
    if any(arg in ("-h", "--help") for arg in sys.argv[1:]):
        print(__doc__)
    show_library_output = VERBOSE_FLAG in sys.argv[1:]
    sys.argv = [arg for arg in sys.argv if arg != VERBOSE_FLAG]
    main()
