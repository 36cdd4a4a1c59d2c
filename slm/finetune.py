"""Instruction fine-tuning of GPT-2 on Alpaca-format data with the Hugging Face Trainer.

Usage:
    python slm/finetune.py                                      # GPT-2 124M on tatsu-lab/alpaca (hub + GPU)
    python slm/finetune.py data.source=/data/alpaca_data.json   # local copy of the Alpaca JSON
    python slm/finetune.py --config-name slm_tiny_offline       # tiny model on samples/, CPU, ~4 min
    python slm/finetune.py --config-name slm_tiny_offline train.epochs=2 output_dir=/tmp/slm_try
    python slm/finetune.py --config-name slm_whisper_offline    # Whisper tiny.en's decoder as a GPT-2 (tools/whisper_to_gpt2.py and tools/make_english_text.py first)
    torchrun --nproc_per_node 4 slm/finetune.py                 # DDP over 4 GPUs (same for accelerate launch)

Configs live in configs/ (slm_gpt2_alpaca.yaml, slm_tiny_offline.yaml, slm_whisper_offline.yaml); any key can be overridden as
key=value, and an unknown key or a value of the wrong type is an error. The output folder holds the
model and tokenizer (loadable with from_pretrained), finetune_config.yaml (resolved config),
metrics.json (validation losses, BLEU/ROUGE/BERTScore and on-topic shares before -> after), generations_*.jsonl,
eval_summary.json, the BLEU/ROUGE charts, log_history.jsonl and finetune.log.

Resume: a run works in <output_dir's parent>/.<name>.partial and moves it to output_dir when it has finished.
If it stops (an error, Ctrl-C, a killed job) after training began, the folder is kept; the same command again
continues from its last checkpoint (train.save_steps=N writes one every N steps; train.save_total_limit, default 2,
keeps the newest) with the same config. The model is saved before the final evaluation, so a failing evaluation
loses no training; a finished run removes its checkpoints (the saved model replaces them).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import TextIO

from omegaconf import OmegaConf

from duet.foundation import python_command
from duet.foundation.errors import cli, first_line
from duet.foundation.files import (add_log_arguments, library_output_to, log_target, write_jsonl_atomic,
                                   write_text_atomic)
from slm.config import DEFAULT_CONFIG, OFFLINE_CONFIG, ConfigError, load_config, partial_dir, resolve_path
from slm.errors import SlmError
from slm.torch_build import require_torch_to_see_the_gpus

log = logging.getLogger("slm.finetune")


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config-name", default=DEFAULT_CONFIG, help="YAML in configs/ without .yaml")
    parser.add_argument("overrides", nargs="*", help="key=value overrides, e.g. train.epochs=1")
    add_log_arguments(parser, "finetune")
    return parser


def hub_names(cfg) -> list[str]:
    """Model and data sources that are hub names rather than local files or folders."""
    names = []
    if cfg.model.name_or_path is not None and not resolve_path(cfg.model.name_or_path).is_dir():
        names.append(cfg.model.name_or_path)
    source = resolve_path(cfg.data.source)
    if not source.exists() and source.suffix not in (".json", ".jsonl"):
        names.append(cfg.data.source)
    return names


def check_model_settings(cfg) -> None:
    """Before any data or library loads: a model folder that a command of ours writes (``model.made_by``) must exist
    (without this check its path would be taken for a hub name and the user told the hub is unreachable), and
    ``model.split_digits`` needs a pretrained tokenizer."""
    if cfg.model.split_digits and cfg.model.name_or_path is None:
        raise ConfigError("model.split_digits is for a pretrained tokenizer: the scratch model's BPE is trained on "
                          "the rows themselves (set model.name_or_path, or model.split_digits=false)")
    if cfg.model.made_by and cfg.model.name_or_path is not None and not resolve_path(cfg.model.name_or_path).is_dir():
        raise ConfigError(f"model folder {cfg.model.name_or_path} not found: make it with "
                          f"{python_command(cfg.model.made_by)}")


def hub_reachable(timeout: float = 3.0) -> bool:
    """Whether the hub answers an HTTP request; failing fast here replaces a minute of retries inside
    huggingface_hub. urllib goes through HTTPS_PROXY / HTTP_PROXY as the hub clients do, so a machine that
    reaches the hub only by its proxy counts as online; any HTTP answer, even an error status, means reachable."""
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    try:
        # a fresh opener reads the proxy settings now (urlopen's global one keeps those of its first call)
        opener = urllib.request.build_opener()
        opener.open(urllib.request.Request(endpoint, method="HEAD"), timeout=timeout).close()
        return True
    except urllib.error.HTTPError:
        return True
    except (OSError, ValueError):  # URLError is an OSError; ValueError: a malformed HF_ENDPOINT
        return False


def load_splits(cfg) -> dict[str, list[dict]]:
    # torch takes ~9 s to import: --help and argument errors answer before it loads
    from slm.data import load_alpaca, split_examples

    from slm.modeling import HubUnreachable

    source = cfg.data.source
    try:
        rows = load_alpaca(str(resolve_path(source)) if resolve_path(source).exists() else source)
    except ConnectionError as e:
        raise HubUnreachable(f"cannot load dataset '{source}' ({first_line(e, 160)})") from None
    except (ValueError, FileNotFoundError) as e:
        raise ConfigError(str(e)) from None
    if cfg.data.max_examples:
        rows = rows[: cfg.data.max_examples]
    splits = split_examples(rows, list(cfg.data.split), cfg.data.split_seed)
    if cfg.data.tool_rows:  # rows whose answers call tools or refuse, for the training split only
        try:
            splits["train"] = splits["train"] + load_alpaca(str(resolve_path(cfg.data.tool_rows)))
        except (ValueError, FileNotFoundError) as e:
            raise ConfigError(f"data.tool_rows: {e}") from None
    return splits


def get_model_and_tokenizer(cfg, train_rows: list[dict], resume_checkpoint: Path | None = None):
    """Pretrained GPT-2 (hub name / folder) or, with ``model.name_or_path: null``, a fresh tiny one (whose
    tokenizer, on a resume, is the one saved with the checkpoint; the weights come from the checkpoint)."""
    # transformers takes ~2.6 s to import (slm.modeling imports it): --help and argument errors answer before it loads
    from slm.data import format_alpaca_example
    from slm.modeling import build_scratch_model, load_pretrained, load_tokenizer, split_digits, train_bpe_tokenizer

    if cfg.model.name_or_path is not None:
        path = resolve_path(cfg.model.name_or_path)
        tokenizer, model = load_pretrained(str(path) if path.is_dir() else cfg.model.name_or_path, dropout=cfg.model.dropout)
        if cfg.model.split_digits:
            split_digits(tokenizer)
        if cfg.data.max_length > model.config.n_positions:
            raise ConfigError(f"data.max_length={cfg.data.max_length} exceeds the positions of model "
                              f"{cfg.model.name_or_path} ({model.config.n_positions})")
        return tokenizer, model
    scratch = cfg.model.scratch
    if resume_checkpoint is not None:
        tokenizer = load_tokenizer(str(resume_checkpoint))
    else:
        tokenizer = train_bpe_tokenizer((format_alpaca_example(row) for row in train_rows), scratch.vocab_size)
    model = build_scratch_model(tokenizer, scratch.n_layer, scratch.n_embd, scratch.n_head, scratch.n_positions,
                                cfg.model.dropout, cfg.seed)
    if cfg.data.max_length > scratch.n_positions:
        raise ConfigError(f"data.max_length={cfg.data.max_length} exceeds model.scratch.n_positions={scratch.n_positions}")
    return tokenizer, model


def make_training_args(cfg, output_dir: Path, precision: str, n_eval: int):
    # transformers takes ~2.6 s to import: --help and argument errors answer before it loads
    from transformers import TrainingArguments

    from slm.modeling import precision_arguments  # torch at its top: ~9 s

    t = cfg.train
    return TrainingArguments(
        output_dir=str(output_dir), seed=cfg.seed, data_seed=cfg.seed,
        learning_rate=t.learning_rate, weight_decay=t.weight_decay, optim="adamw_torch",
        lr_scheduler_type=t.lr_scheduler, warmup_steps=t.warmup_steps,
        per_device_train_batch_size=t.batch_size, per_device_eval_batch_size=cfg.eval.batch_size,
        gradient_accumulation_steps=t.grad_accum, num_train_epochs=t.epochs, max_steps=t.max_steps,
        eval_strategy="steps" if n_eval else "no", eval_steps=t.eval_steps,
        logging_strategy="steps", logging_steps=t.logging_steps, disable_tqdm=True, report_to="none",
        save_strategy="steps" if t.save_steps else "no", save_steps=t.save_steps or 500,
        save_total_limit=t.save_total_limit,
        train_sampling_strategy="group_by_length" if t.group_by_length else "random",
        include_num_input_tokens_seen="non_padding", **precision_arguments(precision),
        use_cpu=precision == "fp32" and not _cuda(),
        remove_unused_columns=False, dataloader_num_workers=0,
        ddp_timeout=t.ddp_timeout,
        ddp_find_unused_parameters=False)  # GPT-2 uses every weight each step: skip DDP's extra graph walk


def _cuda() -> bool:
    # torch takes ~9 s to import: --help and argument errors answer before it loads
    import torch

    return torch.cuda.is_available()


def make_progress_callback():
    # transformers takes ~2.6 s to import: --help and argument errors answer before it loads
    from transformers import TrainerCallback

    class ProgressLines(TrainerCallback):
        """One line per logging interval: step, loss, learning rate, real tokens/s; eval loss when present."""

        def __init__(self):
            self.started = time.time()

        def on_log(self, args, state, control, logs=None, **kwargs):
            if not state.is_world_process_zero or not logs:
                return
            elapsed = time.time() - self.started
            parts = [f"step {state.global_step}/{state.max_steps}", f"epoch {state.epoch:.2f}"]
            if "loss" in logs:
                parts += [f"loss {logs['loss']:.4f}", f"lr {logs.get('learning_rate', 0):.2e}"]
                if state.num_input_tokens_seen:
                    parts.append(f"{state.num_input_tokens_seen / elapsed:.0f} tok/s")
            if "eval_loss" in logs:
                parts.append(f"val_loss {logs['eval_loss']:.4f}")
            if "loss" in logs or "eval_loss" in logs:
                log.info("  ".join(parts + [f"{elapsed:.0f}s"]))

    return ProgressLines()


def setup_logging(log_file: Path | None, console: TextIO | None = None) -> None:
    """Progress to ``console`` (default stdout) and, when ``log_file`` is given, appended to it (a resumed run
    continues its log)."""
    log.setLevel(logging.INFO)
    log.propagate = False
    for old in list(log.handlers):
        log.removeHandler(old)
        old.close()
    fmt = logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S")
    handlers = [logging.StreamHandler(console or sys.stdout)] + ([logging.FileHandler(log_file)] if log_file else [])
    for handler in handlers:
        handler.setFormatter(fmt)
        log.addHandler(handler)


class ResumeConflict(ConfigError):
    """A kept partial run was started with another config: resuming it would mix two trainings."""


def last_checkpoint(work_dir: Path) -> Path | None:
    """The newest complete checkpoint. The Trainer writes a checkpoint in place and its trainer_state.json last,
    so a job killed while saving (a 124M checkpoint with its optimiser state is 1.5 GB) leaves a newer folder
    without one; resuming from that would fail, so it is passed over."""
    # transformers takes ~2.6 s to import: --help and argument errors answer before it loads
    from transformers.trainer import TRAINER_STATE_NAME
    from transformers.trainer_utils import sort_checkpoints

    checkpoints = work_dir / "checkpoints"
    if not checkpoints.is_dir():
        return None
    for found in reversed(sort_checkpoints(str(checkpoints))):
        if (Path(found) / TRAINER_STATE_NAME).is_file():
            return Path(found)
        log.warning("skipping %s: its save was interrupted", found)
    return None


def remove_checkpoints(checkpoints: Path) -> None:
    """Delete a finished run's checkpoints: they only serve resuming a stopped run (a re-run of a finished one starts
    afresh), the saved model replaces them, and each is ~1.5 GB for GPT-2 124M. The log names the ones removed, so
    that a run shows how many ``train.save_total_limit`` kept."""
    # transformers takes ~2.6 s to import: --help and argument errors answer before it loads
    from transformers.trainer_utils import sort_checkpoints

    found = sort_checkpoints(str(checkpoints)) if checkpoints.is_dir() else []
    if found:
        log.info("removing the checkpoints %s: the saved model replaces them", ", ".join(Path(p).name for p in found))
    shutil.rmtree(checkpoints, ignore_errors=True)


def run(cfg, console: TextIO | None = None) -> dict:
    """Train and evaluate; returns the metrics written to metrics.json (empty on ranks other than 0). Progress lines
    go to ``console`` (default stdout)."""
    # transformers takes ~2.6 s to import: --help and argument errors answer before it loads
    import transformers

    started = time.time()
    transformers.set_seed(cfg.seed)
    if cfg.train.threads:
        # torch takes ~9 s to import: --help and argument errors answer before it loads
        import torch

        torch.set_num_threads(cfg.train.threads)
    require_torch_to_see_the_gpus()  # else a GPU machine with the wrong torch build trains on its CPU, unsaid
    final_dir = resolve_path(cfg.output_dir)
    work_dir = partial_dir(final_dir)
    is_rank_zero = int(os.environ.get("RANK", "0")) == 0
    config_text = OmegaConf.to_yaml(cfg, resolve=True)
    kept = work_dir / "finetune_config.yaml"
    resuming = kept.is_file()
    if resuming and kept.read_text() != config_text:
        raise ResumeConflict(f"{work_dir} holds a stopped run with another config ({kept}); re-run with that "
                             f"config to resume it, or delete the folder to start afresh")
    work_dir.mkdir(parents=True, exist_ok=True)
    setup_logging(work_dir / "finetune.log" if is_rank_zero else None, console)
    progress = {"training_started": resuming}
    try:
        return _train_and_evaluate(cfg, config_text, work_dir, final_dir, started, is_rank_zero, progress)
    except BaseException:
        if progress["training_started"]:
            # keep the checkpoints: the same command resumes from the last one
            log.error("stopped; kept %s: run the same command again to resume%s", work_dir,
                      "" if cfg.train.save_steps else " (train.save_steps is unset, so it will start over)")
        elif is_rank_zero:
            shutil.rmtree(work_dir, ignore_errors=True)  # nothing trained yet: leave nothing half-written
        raise


def _train_and_evaluate(cfg, config_text: str, work_dir: Path, final_dir: Path, started: float,
                        is_rank_zero: bool, progress: dict) -> dict:
    # torch takes ~9 s to import: --help and argument errors answer before it loads
    import datasets
    import torch
    from transformers.trainer_callback import PrinterCallback

    from slm.data import AlpacaCollator, replay_sentences, tokenize_example, tokenize_text
    from slm.evaluation import evaluate_model, write_report
    from slm.modeling import answer_loss_trainer, count_parameters, pick_device_and_training_precision

    # Data and model first: when either cannot be loaded (no hub, bad file) the user sees one error line,
    # not the config dump followed by it.
    splits = load_splits(cfg)
    if cfg.data.replay_per_row < 0 or (cfg.data.replay_per_row > 0 and not cfg.data.replay_text):
        raise ConfigError(f"data.replay_per_row={cfg.data.replay_per_row:g} needs data.replay_text (a file of "
                          f"sentences) and must not be negative; data.replay_per_row=0 turns replay off")
    replay = (replay_sentences(resolve_path(cfg.data.replay_text), cfg.data.replay_per_row, len(splits["train"]),
                               cfg.data.split_seed) if cfg.data.replay_per_row > 0 else [])
    resume_from = last_checkpoint(work_dir)
    tokenizer, model = get_model_and_tokenizer(cfg, splits["train"], resume_from)
    log.info("config:\n%s", config_text.rstrip())
    if is_rank_zero:  # the resolved config run() compares a re-run against
        write_text_atomic(work_dir / "finetune_config.yaml", config_text)
    progress["training_started"] = True
    if resume_from:
        log.info("resuming %s from %s", work_dir, resume_from.name)
    log.info("data %s: %s", cfg.data.source, ", ".join(f"{k} {len(v)}" for k, v in splits.items()))
    device, precision = pick_device_and_training_precision(cfg.train.precision)
    model.to(device)
    n_params = count_parameters(model)
    log.info("model: %s, %.2f M parameters, vocab %d, %s", cfg.model.name_or_path or "GPT-2 from scratch",
             n_params / 1e6, len(tokenizer), precision)

    tokenized = {name: [tokenize_example(row, tokenizer, cfg.data.max_length) for row in rows]
                 for name, rows in splits.items()}
    if replay:
        tokenized["train"] += [tokenize_text(text, tokenizer, cfg.data.max_length) for text in replay]
        log.info("replay: %d sentences of %s among the %d training rows", len(replay), cfg.data.replay_text,
                 len(splits["train"]))
    for rows in tokenized.values():
        for row in rows:
            row["length"] = len(row["input_ids"])  # read by the length-grouping sampler
    n_eval = len(tokenized["validation"]) if cfg.train.eval_examples is None else cfg.train.eval_examples
    eval_rows = tokenized["validation"][:n_eval]
    generation_rows = splits["test"] if cfg.eval.num_generate is None else splits["test"][: cfg.eval.num_generate]

    def evaluate(label: str) -> tuple[dict, list[dict]]:
        log.info("evaluating the %s model (validation losses, greedy answers to test rows)", label)
        return evaluate_model(model, tokenizer, splits["validation"], generation_rows, cfg.data.max_length,
                              cfg.eval.max_new_tokens, cfg.eval.batch_size, cfg.eval.bertscore_model, log=log.info)

    trainer = answer_loss_trainer(model=model, args=make_training_args(cfg, work_dir / "checkpoints", precision, n_eval),
                      train_dataset=datasets.Dataset.from_list(tokenized["train"]),
                      eval_dataset=datasets.Dataset.from_list(eval_rows) if n_eval else None,
                      data_collator=AlpacaCollator(tokenizer.eos_token_id, mask_prompt=cfg.data.mask_prompt),
                      processing_class=tokenizer, callbacks=[make_progress_callback()])
    trainer.remove_callback(PrinterCallback)  # its raw dicts would duplicate the progress lines

    # Under torchrun every process trains, but only rank 0 evaluates (generation and metrics are local to one
    # process) and writes the output folder. The Trainer exists first, so every rank has joined the process group;
    # the others then wait at the barrier below while rank 0 scores the starting model, for at most
    # train.ddp_timeout (the Trainer's 30-minute default could run out: 200 answers, a first roberta-large download).
    results, records = {}, {}
    before_file = work_dir / "before.json"  # a resumed run reuses its starting model's scores
    if cfg.eval.before_training and is_rank_zero:
        if before_file.is_file():
            saved = json.loads(before_file.read_text())
            results["before"], records["before"] = saved["summary"], saved["records"]
        else:
            results["before"], records["before"] = evaluate("starting")
            write_text_atomic(before_file, json.dumps({"summary": results["before"], "records": records["before"]}))
    trainer.accelerator.wait_for_everyone()
    train_started = time.time()
    train_output = trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
    train_seconds = time.time() - train_started

    if not trainer.is_world_process_zero():
        return {}
    trainer.save_model(str(work_dir))  # before evaluating: a failing evaluation must not lose the training
    results["after"], records["after"] = evaluate("fine-tuned")
    write_report(work_dir, results, records)
    write_jsonl_atomic(work_dir / "log_history.jsonl", trainer.state.log_history)
    remove_checkpoints(work_dir / "checkpoints")
    metrics = {"parameters": n_params, "train_rows": len(splits["train"]), "replay_rows": len(replay),
               "train_loss": train_output.training_loss, "train_steps": trainer.state.global_step,
               "train_seconds": round(train_seconds, 1),
               "total_seconds": round(time.time() - started, 1), "device": device, "precision": precision,
               "torch_threads": torch.get_num_threads(), "loss_target": "answer only" if cfg.data.mask_prompt else "prompt + answer",
               **{label: summary for label, summary in results.items()}}
    write_text_atomic(work_dir / "metrics.json", json.dumps(metrics, indent=2) + "\n")
    for record in records["after"][: cfg.eval.samples]:
        log.info("  %r -> %r", (record["instruction"] + (" | " + record["input"] if record["input"] else "")),
                 record["generation"])
    before_file.unlink(missing_ok=True)
    if final_dir.exists():
        shutil.rmtree(final_dir)
    os.replace(work_dir, final_dir)
    before, after = results.get("before", {}), results["after"]
    changes = ", ".join(f"{name} {_fmt(before.get(key), spec)} -> {_fmt(after.get(key), spec)}" for name, key, spec in (
        ("val masked loss", "masked_loss", ".3f"), ("unmasked loss", "unmasked_loss", ".3f"),
        ("BLEU-4", "bleu4", ".1f"), ("ROUGE-L", "rougeL", ".1f"), ("BERTScore F1", "bertscore_f1", ".1f"),
        ("on-topic assistant answers %", "assistant_on_topic", ".0f")))
    log.info("done in %.0f s (training %.0f s): %s%s; saved %s", metrics["total_seconds"], train_seconds, changes,
             f" ({after['bertscore_model']})" if "bertscore_model" in after else "", final_dir)
    return metrics


def _fmt(value, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


@cli
def main(argv: list[str] | None = None) -> int:
    args = get_parser().parse_args(argv)
    cfg = load_config(args.config_name, args.overrides)
    check_model_settings(cfg)
    names = hub_names(cfg)
    if names and not hub_reachable():
        # Use only the local cache from here on: a cached model still works, a missing one fails at once.
        os.environ["HF_HUB_OFFLINE"] = os.environ["HF_DATASETS_OFFLINE"] = "1"
    try:
        # transformers' lines and progress bars (loading, writing shards), datasets' and evaluate's to --log
        with library_output_to(log_target(args)) as (out, _):
            run(cfg, out)
    except RuntimeError as e:
        from slm.modeling import HubUnreachable  # torch + transformers: the config error path stays fast

        if not isinstance(e, HubUnreachable):
            raise
        raise SlmError(f"the Hugging Face hub is unreachable ({e}); run the offline preset instead: "
                       f"{python_command('slm/finetune.py', '--config-name', OFFLINE_CONFIG)}") from e
    return 0


if __name__ == "__main__":
    sys.exit(main())
