#!/usr/bin/env python
"""Run the whole duet toolkit end to end on the bundled sample, offline, on CPU: about 12 minutes on 2 idle cores, the
SLM's training beside the ASR fine-tune (measured from scratch in RESULTS.md, "The whole demo"); longer where other
work shares the cores.

Usage:
  python tools/demo.py                 # every stage; a finished stage with unchanged inputs is skipped
  python tools/demo.py --list          # the stages and the exact command each one runs
  python tools/demo.py --only asr
  python tools/demo.py --from slm
  python tools/demo.py --only lm --verbose    # show the stage's own output live, as well as in its log
  python tools/demo.py --asr-epochs 2         # a shorter ASR fine-tune than the demo's own 4 passes (2 with the
                                              # real mix): a quicker look, learning less
  python tools/demo.py --slm-steps 320        # the same for the SLM (its config's train.max_steps)

Each stage prints its command, its progress while it runs, and its result in one line. The command's own output
(NeMo, Lightning and transformers logs) goes to experiments/<stage>/log.txt, e.g. experiments/asr/log.txt;
--verbose shows it live too. The progress is read from that log (duet/demo/progress.py): the ASR fine-tune's
epoch and step of all its steps, the SLM's step, any other progress bar, with the time left at the stage's own
pace so far, e.g. "running 1:00: epoch 1/2, step 40/198 (20 %), about 3 min left": redrawn in place on a
terminal, a new line every 30 s otherwise (a log file, CI). A failing stage prints the last 20 lines of its log.

Stages, each one of the toolkit's own entry scripts run as a user would:
  manifests  samples/LibriSpeech -> manifests/{train,dev,test}-clean.json
  pool       0.2 h of wideband speech from the base checkpoint's own synthetic training pool (every training
             voice of every Debian TTS engine), to mix into the fine-tune so that it keeps hearing those voices
  poolmix    its manifest
  realmix    (only where ../shared/real_speech exists) 780 utterances of speechocean762/train, the base's own
             real training speech, to mix into the fine-tune so that it keeps hearing people
  asr        fine-tune the bundled Whisper base (samples/checkpoints/whisper_tiny_ctc.nemo: Whisper tiny.en's
             pretrained encoder + a CTC head, its own tokenizer kept) on the sample's telephone speech + the pool
             (+ the real mix); WER on the held-out test-clean voices before -> after
  realtext   (only where ../shared/real_speech exists) speechocean762/train's transcripts, its 8 dev speakers apart
  lmtext     100,000 in-domain sentences from the corpus's text generator (never a dev/test sentence), then
             WordNet's ~37,000 examples of everyday English (for real speech), then (where ../shared/real_speech
             exists) speechocean762/train's transcripts outside its dev speakers, four times over
  lm         a token 6-gram LM (KenLM) on that text over the base's tokenizer, for beam search in the pipeline
  slm        fine-tune the pretrained start (Whisper tiny.en's text decoder as a GPT-2: configs/slm_whisper_demo.yaml;
             tools/whisper_to_gpt2.py and tools/make_english_text.py make its start and replay text first, when
             missing) on samples/alpaca_sample.json, whose answers call tools for sums, conversions and the time;
             metrics after. It needs nothing the stages before it make and trains on one thread, so it starts with
             the demo and runs beside them (its log fills meanwhile); its progress shows when the demo reaches it.
             SLM_CONFIG=slm_tiny_offline python tools/demo.py trains the from-scratch preset instead
  pipeline   speech -> transcript (joint decoding: Whisper tiny.en proposes, the fine-tuned CTC model with the
             beam search + LM judges) -> answer on the held-out assistant-domain test utterances;
             the decoding and the model's low-confidence threshold are saved as experiments/demo_asr/decoding.json,
             which tools/pipeline.py and tools/serve.py then use
  generalise the base and the fine-tuned model on every set of bench/asr_generalisation.py (the sample's
             test-clean, unseen synthetic voices, and the held-out real speech of ../shared/real_speech when it
             exists): WER before -> after, greedy; a real set more than 2 points worse flagged
  joint-base, joint
             the sample's test-clean voices decoded as the pipeline decodes them (the joint decoding), the base
             and then the fine-tune judging: what the fine-tune moves in the transcripts a user reads
Outputs go to manifests/ and experiments/ (both git-ignored). Ends with a summary table and a
"next: try ..." line: the tools/pipeline.py and tools/serve.py commands that answer with the demo's models. The
pipeline stage's example answers are chosen by slm.metrics.check_answer (on topic, and any sum, conversion or
temperature worked out right against what was actually said): the correct ones first, then wrong ones labelled.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

from duet import SAMPLES_DIR
from duet.demo.stages import (DEMO_ASR_MODEL, DEMO_DECODING, DEMO_GENERALISATION, DEMO_LM, DEMO_LM_TEXT, DEMO_MIN_CONFIDENCE,
                       DEMO_SLM_MODEL, AsrFineTune, EXPERIMENTS, LM_ORDER, LM_SENTENCES, LM_TRANSCRIPT_TIMES,
                       BackgroundRun, Stage, asr_summary, demo_decoding, generalisation_summary, log_tail, next_steps,
                       pipeline_summary, shown, slm_summary, threads_beside, write_demo_decoding)
from duet.asr.generalisation import SAMPLE_TEST_SET
from duet.data.real_speech import DEFAULT_ROOT as REAL_SPEECH
from duet.demo.progress import ConsoleProgress, LogProgress
from duet.synth.corpus import bundled_sample_kinds
from duet.foundation import REPO_ROOT, python_command
from duet.foundation.errors import cli
from duet.foundation.files import read_jsonl, write_jsonl_atomic
from slm.config import load_config, partial_dir, resolve_path

# The base the demo fine-tunes: Whisper tiny.en's pretrained encoder with a CTC head (configs/whisper_tiny_ctc.yaml;
# the FastConformer base, samples/checkpoints/fastconformer_tiny_base.nemo, trained from scratch here, hears far
# less real speech: RESULTS.md, "Whisper base"). Its own tokenizer is kept: a new one would throw its trained CTC
# head away, so the demo trains no tokenizer (tools/train_tokenizer.py makes one for a new model).
BASE_CHECKPOINT = SAMPLES_DIR / "checkpoints" / "whisper_tiny_ctc.nemo"
# The fine-tune's passes (steps of 16 utterances: 99 an epoch with the real mix, 51 without it) and learning rates.
# Chosen on base v4, which already heard the sample's held-out voices at 32.4 %: one epoch at
# whisper_tiny_finetune.yaml's 3e-4 (encoder x0.1) left them at 32.8 %; two at 1e-3 took them to 26.1 % (x0.1, unseen
# voices 4.3 points worse), 27.8 % (x0.05, unseen +2.6) or 29.2 % (x0.02, unseen +1.2, every real set within 2
# points). Kept for base v5: 34.0 -> 28.2 %, unseen +1.9, every real set within 1.2 points. Without the real mix the
# other voices suffer more, and the head's rate decides how much: from v5, four epochs at x0.01 took the sample to
# 27.0 % at 1e-3 (unseen +3.1; at x0.005 +3.6; three epochs 28.2 %, +3.5; two 30.1 %, +3.0) and 28.4 % at 5e-4
# (unseen +1.1). Both kept for base v6: 37.1 -> 29.5 % (unseen +1.9), without the real mix 29.9 % (unseen +2.0)
# (RESULTS.md, "Demo fine-tune from the Whisper base").
ASR_FINE_TUNE = {"with real mix": AsrFineTune(epochs=2, head_lr=1e-3, encoder_lr_scale=0.02),
                 "without": AsrFineTune(epochs=4, head_lr=5e-4, encoder_lr_scale=0.01)}
# Base-domain data mixed into the fine-tune, so that it keeps what the base knows. With the sample alone, the
# fine-tune from base v8 made the held-out real sets worse by up to 11.5 WER points (speechocean762/test) and
# unseen voices by 7.7; with 260 real utterances by 4.1 and 4.8; with 780 real + the base's synthetic pool, at
# about the same number of steps, by 1.2 and 1.4 (RESULTS.md; digits, which the base does not hear, +7.1;
# from base v9: +0.7 and +2.0, digits +5.7).
# The pool: synthesised like the base's own corpus (tools/make_sample_corpus.py --pool generalisation),
# wideband; ~280 utterances. The real mix, where ../shared/real_speech exists: utterances of speechocean762/train
# (the base's real training speech, spread over its 65 speakers).
# What the pool is made of (the stage reruns when one changes): voices, engines, sentences, assembly
SYNTH_SOURCES = ("voices.py", "tts.py", "corpus_text.py", "wordnet_text.py", "corpus.py")
POOL = EXPERIMENTS / "demo_pool" / "LibriSpeech"
POOL_HOURS = 0.2
POOL_MIX = EXPERIMENTS / "demo_poolmix" / "train-clean.json"
REAL_MIX = EXPERIMENTS / "demo_realmix" / "train.json"
REAL_MIX_UTTERANCES = 780
# The LM's real text, where ../shared/real_speech exists: speechocean762/train split by speaker like the base's
# own training manifests (tools/make_manifest.py --dev-speakers 8): the transcripts of train.train.json go into the
# LM's text, and no sentence of train.dev.json, the speakers the pipeline's weights are chosen on.
REAL_TEXT_DIR = EXPERIMENTS / "demo_realtext"
REAL_TEXT, REAL_TEXT_DEV = REAL_TEXT_DIR / "train.train.json", REAL_TEXT_DIR / "train.dev.json"
REAL_TEXT_DEV_SPEAKERS = 8
# the held-out assistant requests the pipeline stage answers (written by its prepare step)
REQUESTS = EXPERIMENTS / "demo_pipeline" / "requests.json"
MANIFESTS = {split: REPO_ROOT / "manifests" / f"{split}.json" for split in ("train-clean", "dev-clean", "test-clean")}


def write_assistant_requests(out: Path) -> None:
    """The test-clean utterances that are assistant requests (not read speech), as a manifest."""
    kinds = bundled_sample_kinds("test-clean")
    write_jsonl_atomic(out, [e for e in read_jsonl(MANIFESTS["test-clean"]) if kinds.get(e["text"]) == "assistant"])


def prepare_pipeline(requests: Path):
    """What the pipeline stage reads besides its command: the assistant requests and the demo model's decoding."""
    def prepare() -> None:
        write_assistant_requests(requests)
        write_demo_decoding()
    return prepare


#: the SLM preset the demo trains (configs/<name>.yaml): the pretrained start, or slm_tiny_offline (from scratch)
SLM_CONFIG = os.environ.get("SLM_CONFIG", "slm_whisper_demo")


def prepare_slm(config_name: str, log_dir: Path):
    """What the slm stage's config reads besides the sample, each made by the command its config names when missing:
    the converted pretrained start (``model.made_by``: tools/whisper_to_gpt2.py, about a minute at one thread) and
    the replay text (tools/make_english_text.py, seconds); their output goes to ``log_dir``."""
    def prepare() -> None:
        cfg = load_config(config_name)
        made = []
        if cfg.model.name_or_path is not None and cfg.model.made_by:
            made.append((resolve_path(cfg.model.name_or_path) / "config.json",
                         [sys.executable, cfg.model.made_by, "--threads", "1", "--out",
                          str(resolve_path(cfg.model.name_or_path))]))
        if cfg.data.replay_per_row > 0:
            made.append((resolve_path(cfg.data.replay_text),
                         [sys.executable, "tools/make_english_text.py", "--out", str(resolve_path(cfg.data.replay_text))]))
        for output, command in made:
            if not output.exists():
                with open(log_dir / f"{Path(command[1]).stem}.txt", "wb") as log:
                    subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, check=True, cwd=REPO_ROOT)
    return prepare


def stages(asr_epochs: int | None = None, slm_steps: int | None = None) -> list[Stage]:
    """The demo's stages in order; ``asr_epochs`` replaces the ASR fine-tune's own number of passes, ``slm_steps`` the
    SLM's own number of steps (its config's ``train.max_steps``)."""
    py = sys.executable
    asr_dir, slm_dir, pipeline_dir = DEMO_ASR_MODEL.parent, DEMO_SLM_MODEL, EXPERIMENTS / "demo_pipeline"
    answers, requests = pipeline_dir / "answers.jsonl", REQUESTS
    generalise = [py, "bench/asr_generalisation.py", *([] if REAL_SPEECH.is_dir() else ["--no-real"])]
    base_report, demo_report = (DEMO_GENERALISATION / name / "generalisation.json" for name in ("base", "demo_asr"))
    joint_base, joint_demo = (DEMO_GENERALISATION / name / "generalisation.json"
                              for name in ("joint_base", "joint_demo_asr"))
    # the base's own synthetic pool and, where it exists, its real speech, mixed into the fine-tune
    train_manifests = [MANIFESTS["train-clean"], POOL_MIX] + ([REAL_MIX] if REAL_SPEECH.is_dir() else [])
    mixes = "with real mix" if REAL_SPEECH.is_dir() else "without"
    fine_tune = ASR_FINE_TUNE[mixes] if asr_epochs is None else replace(ASR_FINE_TUNE[mixes], epochs=asr_epochs)
    lm_real_text = (["--manifest", str(REAL_TEXT), "--manifest-times", str(LM_TRANSCRIPT_TIMES),
                     "--exclude", str(REAL_TEXT_DEV)] if REAL_SPEECH.is_dir() else [])
    pipeline_decoding = demo_decoding()
    # the sample's held-out voices as the pipeline decodes them, the base and the fine-tune judging Whisper's proposals
    joint_sample = [py, "bench/asr_generalisation.py", "--no-real", "--sets", SAMPLE_TEST_SET,
                    *pipeline_decoding.command_line()]
    return [
        Stage("manifests", [py, "tools/make_manifest.py"], lambda: f"{len(read_jsonl(MANIFESTS['train-clean']))} "
              f"train / {len(read_jsonl(MANIFESTS['dev-clean']))} dev / {len(read_jsonl(MANIFESTS['test-clean']))} "
              "test utterances"),
        Stage("pool", [py, "tools/make_sample_corpus.py", "--hours", str(POOL_HOURS), "--pool",
                       "generalisation", "--out", str(POOL)],
              lambda: f"{POOL.relative_to(REPO_ROOT)}/ ({POOL_HOURS} h of the base's synthetic pool, wideband)",
              inputs=[REPO_ROOT / "duet" / "synth" / name for name in SYNTH_SOURCES], outputs=[POOL / "train-clean"]),
        Stage("poolmix", [py, "tools/make_manifest.py", "--data-root", str(POOL), "--splits", "train-clean",
                          "--out-dir", str(POOL_MIX.parent)],
              lambda: f"{len(read_jsonl(POOL_MIX))} utterances of the base's synthetic pool to mix in",
              inputs=[POOL], outputs=[POOL_MIX]),
        *([Stage("realmix", [py, "tools/make_manifest.py", "--data-root", str(REAL_SPEECH / "speechocean762"),
                             "--splits", "train", "--out-dir", str(REAL_MIX.parent),
                             "--max-utterances", str(REAL_MIX_UTTERANCES)],
                 lambda: f"{len(read_jsonl(REAL_MIX))} utterances of speechocean762/train to mix in")]
          if REAL_SPEECH.is_dir() else []),
        Stage("asr", [py, "nemo_recipes/finetune_ctc.py", "--config-name", "whisper_tiny_finetune",
                      f"name={DEMO_ASR_MODEL.stem}",
                      f"exp_manager.exp_dir={EXPERIMENTS}", f"init_from_nemo_model={BASE_CHECKPOINT}",
                      f"model.optim.lr={fine_tune.head_lr}", f"encoder_finetune.lr_scale={fine_tune.encoder_lr_scale}",
                      f"model.train_ds.manifest_filepath='{','.join(str(m) for m in train_manifests)}'",
                      f"model.validation_ds.manifest_filepath={MANIFESTS['dev-clean']}",
                      f"model.test_ds.manifest_filepath={MANIFESTS['test-clean']}",
                      f"trainer.max_epochs={fine_tune.epochs}"],
              lambda: asr_summary(asr_dir / "finetune_summary.json"),
              inputs=[BASE_CHECKPOINT, *MANIFESTS.values(), *train_manifests[1:]],
              outputs=[DEMO_ASR_MODEL, asr_dir / "finetune_summary.json"], run_dir=asr_dir, epochs=fine_tune.epochs),
        *([Stage("realtext", [py, "tools/make_manifest.py", "--data-root", str(REAL_SPEECH / "speechocean762"),
                              "--splits", "train", "--out-dir", str(REAL_TEXT_DIR),
                              "--dev-speakers", str(REAL_TEXT_DEV_SPEAKERS)],
                 lambda: f"{len(read_jsonl(REAL_TEXT))} transcripts of speechocean762/train for the LM's text "
                         f"({len(read_jsonl(REAL_TEXT_DEV))} of its {REAL_TEXT_DEV_SPEAKERS} dev speakers kept out)")]
          if REAL_SPEECH.is_dir() else []),
        Stage("lmtext", [py, "tools/make_lm_text.py", "--source", "corpus", "wordnet", "--sentences",
                         str(LM_SENTENCES), *lm_real_text, "--out", str(DEMO_LM_TEXT)],
              lambda: f"{DEMO_LM_TEXT.relative_to(REPO_ROOT)} ({len(DEMO_LM_TEXT.read_text().splitlines())} sentences: "
                      f"{LM_SENTENCES} of the corpus's, then WordNet's"
                      + (f", then speechocean762/train's transcripts x{LM_TRANSCRIPT_TIMES})" if lm_real_text else ")"),
              inputs=[REPO_ROOT / "duet" / "synth" / name for name in ("corpus_text.py", "corpus.py", "wordnet_text.py")]
              + [REPO_ROOT / "tools" / "make_lm_text.py"] + ([REAL_TEXT, REAL_TEXT_DEV] if lm_real_text else []),
              outputs=[DEMO_LM_TEXT]),
        # over the base's tokenizer, which the fine-tune keeps
        Stage("lm", [py, "tools/train_ngram_lm.py", "--unit", "token", "--tokenizer", str(BASE_CHECKPOINT),
                     "--order", str(LM_ORDER), "--text", str(DEMO_LM_TEXT), "--out", str(DEMO_LM)],
              lambda: f"{DEMO_LM.relative_to(REPO_ROOT)} ({DEMO_LM.stat().st_size // 1024} KB)",
              inputs=[BASE_CHECKPOINT, DEMO_LM_TEXT], outputs=[DEMO_LM]),
        # reads only bundled files and trains on one thread: it runs beside the stages before it
        Stage("slm", [py, "slm/finetune.py", "--config-name", SLM_CONFIG, f"output_dir={slm_dir}",
                      *([] if slm_steps is None else [f"train.max_steps={slm_steps}"])],
              lambda: slm_summary(slm_dir / "metrics.json"), prepare=prepare_slm(SLM_CONFIG, EXPERIMENTS / "slm"),
              inputs=[SAMPLES_DIR / "alpaca_sample.json", *sorted((REPO_ROOT / "configs").glob("slm_*.yaml"))],
              outputs=[slm_dir / "config.json", slm_dir / "metrics.json"], background=True,
              # a run stopped part way resumes only under the same settings: cleared when they changed (other steps)
              run_dir=partial_dir(slm_dir)),
        # no decoding options: the pipeline reads the decoding.json that prepare writes beside the model
        # --verbose: NeMo's lines go to standard error, which is this stage's log, like every other stage's
        Stage("pipeline", [py, "tools/pipeline.py", "--manifest", str(requests), "--json", "--verbose",
                           "--asr-model", str(DEMO_ASR_MODEL), "--slm-model", str(slm_dir)],
              lambda: pipeline_summary(answers, requests), prepare=prepare_pipeline(requests),
              inputs=[DEMO_ASR_MODEL, slm_dir / "config.json", DEMO_LM, MANIFESTS["test-clean"]],
              outputs=[answers, DEMO_DECODING], stdout_to=answers, settings={
                  "asr_decoding": {"strategy": pipeline_decoding.strategy, **asdict(pipeline_decoding)},
                  "min_confidence": DEMO_MIN_CONFIDENCE}),
        # one command per model: the base's scores are kept while the base is unchanged
        Stage("generalise-base", [*generalise, "--model", str(BASE_CHECKPOINT), "--out-dir", str(base_report.parent)],
              lambda: f"base scored on {len(json.loads(base_report.read_text())['rows'])} sets",
              inputs=[BASE_CHECKPOINT], outputs=[base_report]),
        Stage("generalise", [*generalise, "--model", str(DEMO_ASR_MODEL), "--out-dir", str(demo_report.parent)],
              lambda: generalisation_summary(base_report, demo_report),
              inputs=[DEMO_ASR_MODEL], outputs=[demo_report]),
        Stage("joint-base", [*joint_sample, "--model", str(BASE_CHECKPOINT), "--out-dir", str(joint_base.parent)],
              lambda: f"base, joint decoding: {SAMPLE_TEST_SET} scored",
              inputs=[BASE_CHECKPOINT, DEMO_LM], outputs=[joint_base]),
        Stage("joint", [*joint_sample, "--model", str(DEMO_ASR_MODEL), "--out-dir", str(joint_demo.parent)],
              lambda: generalisation_summary(joint_base, joint_demo, "the pipeline's joint decoding",
                                                     real_sets=False),
              inputs=[DEMO_ASR_MODEL, DEMO_LM], outputs=[joint_demo]),
    ]


@cli
def main(argv: list[str] | None = None) -> int:
    by_name = {stage.name: stage for stage in stages()}
    names = list(by_name)
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--only", nargs="+", choices=names, help="run just these stages")
    which.add_argument("--from", dest="start", choices=names, help="start at this stage")
    parser.add_argument("--list", action="store_true", help="print the stages and their commands")
    parser.add_argument("--verbose", action="store_true",
                        help="show each stage's own output live (it always goes to experiments/<stage>/log.txt)")
    parser.add_argument("--asr-epochs", type=int, metavar="N",
                        help="passes of the ASR fine-tune over its data (the demo's own: "
                             f"{ASR_FINE_TUNE['without'].epochs}, {ASR_FINE_TUNE['with real mix'].epochs} with the "
                             "real mix); fewer make a quicker demo whose model learns less")
    parser.add_argument("--slm-steps", type=int, metavar="N",
                        help=f"training steps of the SLM (the demo's own: configs/{SLM_CONFIG}.yaml's train.max_steps); "
                             "fewer make a quicker demo whose model answers worse")
    args = parser.parse_args(argv)
    for flag, value in (("--asr-epochs", args.asr_epochs), ("--slm-steps", args.slm_steps)):
        if value is not None and value < 1:
            parser.error(f"{flag} must be at least 1, got {value}")
    if args.asr_epochs is not None or args.slm_steps is not None:
        by_name = {stage.name: stage for stage in stages(asr_epochs=args.asr_epochs, slm_steps=args.slm_steps)}
    selected = names[names.index(args.start):] if args.start else args.only or names

    if args.list:
        for name in selected:
            print(f"{name:10s} {by_name[name].shown()}")
        return 0
    rows, demo_start = [], time.time()
    # A background stage starts now, beside the others, unless it runs alone, its output is shown live, or
    # --only asked for the stages in another order than the list's (a stage after it may read its outputs).
    in_order = selected == [name for name in names if name in selected]
    background = {} if args.verbose or len(selected) == 1 or not in_order else {
        name: BackgroundRun(by_name[name]) for name in selected
        if by_name[name].background and not by_name[name].up_to_date()}
    for name, run in background.items():
        print(f"\n=== {name}: {run.stage.shown()}\n{name}: started beside the stages before it "
              f"(log: {shown(run.stage.log_path)})", flush=True)
    try:
        for name in selected:
            beside = [run for other, run in background.items() if other != name]
            code = run_stage(by_name[name], background.get(name), args.verbose, rows, env=threads_beside(beside))
            background.pop(name, None)
            if code != 0:
                return code
    finally:
        for run in background.values():  # a stage failed (or the demo was interrupted) before its turn ended
            run.stop()

    print("\n=== summary")
    for name, seconds, summary in rows:
        print(f"{name:<10} {seconds:>6}  {summary}")
    print(f"demo: {len(rows)} stage(s) done in {(time.time() - demo_start) / 60:.1f} min")
    print(next_steps(REQUESTS))
    return 0


def run_stage(stage: Stage, background: BackgroundRun | None, verbose: bool, rows: list,
              env: dict[str, str] | None = None) -> int:
    """Run one stage (or wait for it, when it was started in the background), printing its command, progress
    and result, and add its summary row; ``env`` is added to the command's environment. Returns its exit code."""
    print(f"\n=== {stage.name}: {stage.shown()}", flush=True)
    start = background.started if background else time.time()
    if background is None and stage.up_to_date():
        print(f"{stage.name}: outputs are up to date (same command and inputs), skipped")
    else:
        # the stage's own output shows its progress with --verbose; otherwise its log is read for it
        progress = None if verbose else ConsoleProgress(LogProgress(stage.log_path, epochs=stage.epochs),
                                                        sys.stdout, terminal=sys.stdout.isatty())
        if background is not None:
            print(f"{stage.name}: running since the start, beside the stages above; waiting for it", flush=True)
            code = background.wait(on_tick=progress)
        else:
            code = stage.run(verbose=verbose, on_tick=progress, env=env)
        if progress:
            progress.clear()
        log = shown(stage.log_path)
        if code != 0:
            if stage.log_path.is_file():
                print("\n".join([f"--- last lines of {log}:", *log_tail(stage.log_path), "---"]), file=sys.stderr)
            print(f"\ndemo: stage {stage.name!r} failed (exit {code}); its log: {log}; fix it and resume with "
                  f"{python_command('tools/demo.py', '--from', stage.name)}", file=sys.stderr)
            return code
        print(f"{stage.name}: done in {time.time() - start:.0f} s (log: {log})")
    rows.append((stage.name, f"{time.time() - start:.0f} s", stage.summarize()))
    print(f"  {rows[-1][2]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
