#!/usr/bin/env python
"""CPU speed of fastconformer_small (random weights): transcription RTFx and training throughput.

Usage:
  python bench/asr_speed.py --threads 1                  # everything, ~7 minutes at 1 thread
  python bench/asr_speed.py --threads 1 --json experiments/bench/asr_speed.json
  python bench/asr_speed.py --base experiments/my_base/my_base.nemo   # int8 WER change of another checkpoint
  python bench/asr_speed.py --rounds 1 --train-steps 4   # quick look

fastconformer_small (configs/fastconformer_small.yaml, 16 x 176) is built with random weights (speed does
not depend on them) and a 256-piece tokenizer trained on the bundled sample's text. Side by side in one
run, on the bundled sample (samples/LibriSpeech):

1. Transcription RTFx (audio s / wall s, reading the files included) on --splits (default test-clean and
   dev-clean: 140 utterances, 5.1 min): NeMo's ``model.transcribe(paths)`` with its defaults (batch 4,
   file order) vs ours, ``duet.asr.inference.transcribe_files`` (duration-sorted batches of
   --batch-size, torch.inference_mode, the convolution front end channels-last and two utterances at a
   time, and the thread budget spent as that many forked processes decoding whole batches at one thread
   each), in fp32 and with int8 Linear layers (``quantize_linear_int8``). Each setting gets its own
   model instance (same seed), so NeMo's never sees our changes; ours-fp32 and int8 transcripts are
   compared with NeMo's. Beside them, the same model exported by tools/export_onnx.py
   (``duet.asr.onnx_export``: NeMo's exporter, int8 by ONNX Runtime dynamic quantisation of the matrix
   products) and run by ONNX Runtime (``duet.asr.onnx_engine``), fp32 and int8, same files, same batching
   (whole batches shared among --threads threads of this process, each running a one-thread session; at
   least 4 batches per thread, smaller ones where needed); and int8 once more as one session splitting each
   operator over --threads intra-op threads. Then the CPU seconds of each ONNX stage (reading, features,
   graph, CTC decoding) over one more pass, one batch at a time.
   Target: >= 2x (ours), >= 3x (ONNX int8). The figure is the median of --rounds interleaved rounds after one warm-up; the
   spread of the per-round speed-ups is printed too.
2. What int8 costs: WER of --base (a trained checkpoint) on test-clean, fp32 vs int8, same path; and the
   same for its ONNX export (fp32 graph vs int8 graph).
3. Training throughput, audio s per wall s of forward + backward (SpecAugment on) + clipping + AdamW,
   on train-clean, with loaders NeMo builds from configs/ctc_base.yaml's train_ds:
     NeMo default   fixed batches of batch_size utterances, shuffled (use_semi_sorted_batching=false)
     ours           the config as it is (semi-sorted batches, randomization_factor)
     sorted         ours with randomization_factor=0: the least padding NeMo's sampler gives
     lhotse         lhotse dynamic bucketing: batch_duration = batch_size x mean utterance duration
                    (lhotse counts the padding in it), --num-buckets buckets
     ours_nhwc      ours, with 4-D weights channels-last as the recipe trains on CPU
                    (duet.asr.recipe.training_layout); the others keep NeMo's default layout
   Padding fraction = padded samples / all samples of the timed batches. Targets: >= 1.3x, <= 10 %.
   "padding bound" is the speed-up if time were proportional to all samples, padding included.
   --train-steps timed steps per loader after --warmup-steps, in interleaved chunks of 4 steps.

The machine may be shared, so settings are interleaved and every figure is also given per CPU second
(this process and its worker processes; less sensitive to other load). Every setting uses --threads
(default: torch's choice, the physical cores) and no more: NeMo as intra-op threads with data loading in
the main process (num_workers=0, its default), ours as that many one-thread worker processes.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from duet import SAMPLES_DIR
from duet.asr import evaluation, inference
from duet.asr.batching import EVALUATION_BATCHING
from duet.asr.decoding.nemo_decoding import hypothesis_text
from duet.asr.onnx_engine import OnnxCtcModel
from duet.asr.onnx_export import OnnxExportSettings, export_onnx
from duet.data.manifest import build_split_manifest, read_manifest, write_manifest
from duet.data.tokenizer import manifest_texts, train_tokenizer
from duet.foundation import REPO_ROOT
from duet.foundation.errors import cli
from duet.foundation.files import write_text_atomic

DEFAULT_BASE = SAMPLES_DIR / "checkpoints" / "fastconformer_tiny_base.nemo"


def get_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--splits", nargs="+", default=["test-clean", "dev-clean"], help="sample splits to transcribe")
    p.add_argument("--batch-size", type=int, default=EVALUATION_BATCHING.batch_size,
                   help="our transcription batch (evaluate_ctc.py's default)")
    p.add_argument("--rounds", type=int, default=3, help="timed transcription rounds per setting")
    p.add_argument("--base", type=Path, default=DEFAULT_BASE, help="trained checkpoint for the int8 WER change")
    p.add_argument("--train-steps", type=int, default=24, help="timed training steps per loader")
    p.add_argument("--warmup-steps", type=int, default=2, help="untimed training steps per loader first")
    p.add_argument("--num-buckets", type=int, default=30, help="lhotse buckets (NeMo's default)")
    p.add_argument("--skip-training", action="store_true", help="transcription and int8 WER only")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", type=Path, default=None, help="also write the results here (e.g. experiments/bench/)")
    return p


@dataclass
class Throughput:
    """Audio, padding and time of the timed training batches of one loader."""

    sample_rate: int
    audio_samples: int = 0
    batch_samples: int = 0  # audio + padding
    utterances: int = 0
    batches: int = 0
    wall_s: float = 0.0
    cpu_s: float = 0.0

    def add(self, lengths: list[int], padded_length: int, wall_s: float, cpu_s: float) -> None:
        self.audio_samples += sum(lengths)
        self.batch_samples += padded_length * len(lengths)
        self.utterances += len(lengths)
        self.batches += 1
        self.wall_s += wall_s
        self.cpu_s += cpu_s

    @property
    def audio_s(self) -> float:
        return self.audio_samples / self.sample_rate

    @property
    def padding_fraction(self) -> float:
        return 1.0 - self.audio_samples / self.batch_samples

    @property
    def audio_s_per_wall_s(self) -> float:
        return self.audio_s / self.wall_s

    def summary(self) -> dict:
        return {**asdict(self), "audio_s_per_wall_s": self.audio_s_per_wall_s,
                "audio_s_per_cpu_s": self.audio_s / self.cpu_s, "padding_fraction": self.padding_fraction,
                "utterances_per_batch": self.utterances / self.batches}


def cpu_seconds() -> float:
    """CPU seconds of this process and of its finished child processes (our transcription's workers)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def timed(fn):
    """``fn()``'s result, wall seconds and CPU seconds (this process and its workers)."""
    wall, cpu = time.perf_counter(), cpu_seconds()
    result = fn()
    return result, time.perf_counter() - wall, cpu_seconds() - cpu


def sample_data(out: Path, splits: list[str]) -> tuple[dict[str, Path], Path]:
    """Manifests of train-clean, test-clean and ``splits`` and a 256-piece BPE tokenizer on train-clean."""
    manifests = {}
    for split in sorted({"train-clean", "test-clean", *splits}):
        manifests[split] = out / f"{split}.json"
        write_manifest(manifests[split], build_split_manifest(SAMPLES_DIR / "LibriSpeech" / split).entries)
    tokenizer = train_tokenizer(manifest_texts([manifests["train-clean"]]), out / "spe_bpe_v256", vocab_size=256)
    return manifests, tokenizer


def compose_small_config(tokenizer: Path, train_manifest: Path):
    with initialize_config_dir(config_dir=str(REPO_ROOT / "configs"), version_base=None):
        cfg = compose("fastconformer_small", [f"model.tokenizer.dir={tokenizer}",
                                              f"model.train_ds.manifest_filepath={train_manifest}",
                                              "model.validation_ds.manifest_filepath=null",
                                              # null means "the recipe chooses"; the bench loads in this process
                                              "model.train_ds.num_workers=0"])
    OmegaConf.resolve(cfg)
    return cfg


def build_model(cfg, seed: int):
    """fastconformer_small with random weights, no data attached; the same ``seed`` gives the same weights."""
    # NeMo takes ~21 s to import: --help and argument errors answer before it loads
    from nemo.collections.asr.models import EncDecCTCModelBPE

    torch.manual_seed(seed)
    return EncDecCTCModelBPE(cfg.model)


ONNX_CHECK_FILES = 8  # parity-check files of the export (tools/export_onnx.py's default count)


def onnx_export(nemo_path: Path, out: Path, check_audio: list[str]) -> Path:
    """``nemo_path`` exported with its int8 graph into ``out`` (the export's own parity check included)."""
    return export_onnx(nemo_path, out, check_audio[:ONNX_CHECK_FILES], OnnxExportSettings(int8=True)).folder


def transcription_speeds(cfg, paths: list[str], audio_s: float, args, tmp: Path) -> dict:
    def nemo_texts(model):
        return [hypothesis_text(h) for h in model.transcribe(paths)]

    def ours(model):
        return inference.transcribe_files(model, paths, args.batch_size)

    def one_session(model):
        return inference.transcribe_files(model, paths, args.batch_size, workers=1)

    workers = inference.decoding_processes(-(-len(paths) // args.batch_size))
    int8 = inference.quantize_linear_int8(build_model(cfg, args.seed).eval())
    nemo_path = tmp / "fastconformer_small.nemo"
    build_model(cfg, args.seed).save_to(str(nemo_path))
    folder = onnx_export(nemo_path, tmp / "fastconformer_small_onnx", paths)
    settings = {
        "nemo": (build_model(cfg, args.seed).eval(), nemo_texts),
        "ours_fp32": (build_model(cfg, args.seed), ours),
        "ours_int8": (int8, ours),
        "onnx_fp32": (OnnxCtcModel(folder), ours),
        "onnx_int8": (OnnxCtcModel(folder, int8=True), ours),
        # the same graph as one session splitting each operator over its intra-op threads (the engine's way
        # with a single batch, and its default before the decoding threads)
        "onnx_int8_one_session": (OnnxCtcModel(folder, int8=True), one_session),
    }
    texts, walls, cpus = {}, {k: [] for k in settings}, {k: [] for k in settings}
    threads = torch.get_num_threads()
    for name, (model, run) in settings.items():  # warm-up: allocator, oneDNN kernels, layouts
        texts[name] = run(model)
    for r in range(args.rounds):
        for name, (model, run) in settings.items():
            _, wall, cpu = timed(lambda: run(model))
            walls[name].append(wall)
            cpus[name].append(cpu)
            print(f"  round {r + 1}/{args.rounds} {name}: RTFx {audio_s / wall:.1f} (wall)", flush=True)
    stages = {name: onnx_stage_times(settings[name][0], paths, args.batch_size) for name in ("onnx_fp32", "onnx_int8")}
    result = {"onnx_stages": stages}
    for name in settings:
        wall, cpu = statistics.median(walls[name]), statistics.median(cpus[name])
        result[name] = {"rtfx_wall": audio_s / wall, "rtfx_cpu": audio_s / cpu, "walls": walls[name],
                        "differ_from_nemo": sum(a != b for a, b in zip(texts[name], texts["nemo"])),
                        # rounds are interleaved, so each round's ratio compares settings under the same load
                        "round_speedups": [n / w for n, w in zip(walls["nemo"], walls[name])],
                        # processes (ours), decoding threads (ONNX), or 1 (NeMo, one ONNX session)
                        "workers": workers if name.startswith("ours") else threads if name in ("onnx_fp32", "onnx_int8")
                                   else 1,
                        "threads": threads}
    return result


def onnx_stage_times(model: OnnxCtcModel, paths: list[str], batch_size: int) -> dict:
    """Where an ONNX engine's time goes: reading, features (NeMo's preprocessor in torch), the graph (ONNX
    Runtime) and CTC decoding, in wall and CPU seconds over one pass of ``paths`` in our batches."""
    sample_rate = int(model.cfg.sample_rate)
    order = sorted(range(len(paths)), key=lambda i: inference.audio_length(paths[i], sample_rate), reverse=True)
    stages = {name: {"wall_s": 0.0, "cpu_s": 0.0} for name in ("read", "features", "graph", "decoding")}

    def stage(name, fn):
        result, wall, cpu = timed(fn)
        stages[name]["wall_s"] += wall
        stages[name]["cpu_s"] += cpu
        return result

    for start in range(0, len(order), batch_size):
        batch = order[start : start + batch_size]
        audios = stage("read", lambda: [inference.load_audio(paths[i], sample_rate) for i in batch])
        features, lengths = stage("features", lambda: model.features(audios))
        log_probs = stage("graph", lambda: torch.from_numpy(model.run_graph(features, lengths)))
        stage("decoding", lambda: model.decoding.ctc_decoder_predictions_tensor(
            log_probs, decoder_lengths=model.encoded_lengths(lengths)))
    return stages


def int8_wer(base: Path, manifest: Path, batch_size: int, tmp: Path) -> dict:
    wers = {}
    for name in ("fp32", "int8"):
        model = inference.load_asr_model(base, device="cpu")
        if name == "int8":
            inference.quantize_linear_int8(model)
        wers[name] = evaluation.evaluate_manifest(model, manifest, batch_size=batch_size, progress=False).summary["wer"]
    folder = onnx_export(base, tmp / f"{base.stem}_onnx", [e["audio_filepath"] for e in read_manifest(manifest)])
    for name in ("fp32", "int8"):
        model = OnnxCtcModel(folder, int8=name == "int8")
        wers[f"onnx_{name}"] = evaluation.evaluate_manifest(model, manifest, batch_size=batch_size,
                                                          progress=False).summary["wer"]
    return wers


def training_loaders(model, cfg, num_buckets: int) -> dict:
    """NeMo's training loader for each setting: a change to the config's train_ds, loading in the main process."""
    train_ds = cfg.model.train_ds
    mean_duration = statistics.mean(float(e["duration"]) for e in read_manifest(train_ds.manifest_filepath))
    changes = {
        "nemo_default": {"use_semi_sorted_batching": False},
        "ours": {},
        "sorted": {"randomization_factor": 0.0},
        "lhotse": {"use_lhotse": True, "use_bucketing": True, "num_buckets": num_buckets,
                   "batch_duration": round(train_ds.batch_size * mean_duration, 1)},
        "ours_nhwc": {},  # ours, with the recipe's CPU weight layout (duet.asr.recipe.training_layout)
    }
    loaders = {}
    for name, change in changes.items():
        # a detached copy each: NeMo's semi-sorted sampler writes into the config it is given
        ds = OmegaConf.create({**OmegaConf.to_container(train_ds), "num_workers": 0, "pin_memory": False, **change})
        model.setup_training_data(ds)
        loaders[name] = (endless(model._train_dl), change)
    return loaders


def endless(loader):
    while True:
        yield from loader


def training_throughputs(cfg, args) -> dict:
    model = build_model(cfg, args.seed).train()
    loaders = training_loaders(model, cfg, args.num_buckets)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step(batches):
        signal, signal_len, tokens, tokens_len = next(batches)
        log_probs, encoded_len, _ = model.forward(input_signal=signal, input_signal_length=signal_len)
        loss = model.loss(log_probs=log_probs, targets=tokens, input_lengths=encoded_len, target_lengths=tokens_len)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return signal_len.tolist(), signal.shape[1]

    stats = {name: Throughput(int(cfg.model.sample_rate)) for name in loaders}

    def layout(name):  # parameters keep their identity, so the one optimizer goes on working
        nhwc = name == "ours_nhwc"
        model.to(memory_format=torch.channels_last if nhwc else torch.contiguous_format)

    for name, (batches, _) in loaders.items():
        layout(name)
        for _ in range(args.warmup_steps):
            step(batches)
    chunk = 4
    for start in range(0, args.train_steps, chunk):
        for name, (batches, _) in loaders.items():
            layout(name)
            for _ in range(min(chunk, args.train_steps - start)):
                (lengths, padded), wall, cpu = timed(lambda: step(batches))
                stats[name].add(lengths, padded, wall, cpu)
        done = ", ".join(f"{name} {s.audio_s_per_wall_s:.2f}" for name, s in stats.items())
        steps = min(start + chunk, args.train_steps)
        print(f"  {steps}/{args.train_steps} steps, audio s / wall s: {done}", flush=True)
    return {name: {**stats[name].summary(), "change": change} for name, (_, change) in loaders.items()}


def print_tables(trans: dict, wers: dict, train: dict | None, args, n_files: int, audio_s: float) -> None:
    nemo = trans["nemo"]
    print(f"\nTranscription, {n_files} files ({audio_s / 60:.1f} min), median of {args.rounds} rounds:\n")
    print("| setting | batching; parallelism | RTFx (wall) | RTFx (CPU) | speed-up wall / CPU | transcripts != NeMo |")
    print("|---|---|---:|---:|---:|---:|")
    threads = torch.get_num_threads()
    ours = f"{args.batch_size}, duration-sorted; {trans['ours_fp32']['workers']} process(es)"
    onnx = (f"<= {args.batch_size}, duration-sorted, >= {inference.BATCHES_PER_THREAD} per thread; {threads} "
            "threads, one-thread sessions")
    rows = [("NeMo `model.transcribe(paths)`", f"4, file order; {threads} thread(s)", "nemo"),
            ("ours fp32", ours, "ours_fp32"), ("ours int8 Linear", ours, "ours_int8"),
            ("ONNX Runtime fp32", onnx, "onnx_fp32"), ("ONNX Runtime int8 (dynamic, MatMul)", onnx, "onnx_int8"),
            ("ONNX Runtime int8, one session", f"{args.batch_size}, duration-sorted; {threads} intra-op thread(s)",
             "onnx_int8_one_session")]
    for label, batching, key in rows:
        r = trans[key]
        differ = "-" if key == "nemo" else f"{r['differ_from_nemo']}/{n_files}"
        print(f"| {label} | {batching} | {r['rtfx_wall']:.1f} | {r['rtfx_cpu']:.1f} | "
              f"{r['rtfx_wall'] / nemo['rtfx_wall']:.2f}x / {r['rtfx_cpu'] / nemo['rtfx_cpu']:.2f}x | {differ} |")
    spread = ", ".join(f"{key} {min(trans[key]['round_speedups']):.2f}-{max(trans[key]['round_speedups']):.2f}x"
                       for key in ("ours_fp32", "ours_int8", "onnx_fp32", "onnx_int8", "onnx_int8_one_session"))
    print(f"\nspeed-up (wall) per round: {spread}")
    for key, stages in trans["onnx_stages"].items():
        total = sum(t["cpu_s"] for t in stages.values())
        print(f"{key}, CPU s per stage (one pass): " + ", ".join(
            f"{name} {t['cpu_s']:.2f} ({100 * t['cpu_s'] / total:.0f} %)" for name, t in stages.items()))
    print(f"\nint8 on `{args.base.name}`, test-clean: WER {100 * wers['fp32']:.2f} % fp32 -> "
          f"{100 * wers['int8']:.2f} % int8 ({100 * (wers['int8'] - wers['fp32']):+.2f} points); ONNX "
          f"{100 * wers['onnx_fp32']:.2f} % fp32 -> {100 * wers['onnx_int8']:.2f} % int8 "
          f"({100 * (wers['onnx_int8'] - wers['onnx_fp32']):+.2f} points)")
    if train is None:
        return
    base = train["nemo_default"]
    print(f"\nTraining (forward + backward + AdamW), train-clean, {args.train_steps} timed steps per loader:\n")
    print("| loader | change to ctc_base.yaml | utts/batch | padding | audio s / wall s | audio s / CPU s "
          "| speed-up wall / CPU | padding bound |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    labels = {"nemo_default": "NeMo default (fixed 16, shuffled)", "ours": "ours (ctc_base.yaml: semi-sorted)",
              "sorted": "semi-sorted, no randomisation", "lhotse": "lhotse dynamic bucketing",
              "ours_nhwc": "ours + channels-last weights (the recipe on CPU)"}
    for key, label in labels.items():
        r = train[key]
        change = ", ".join(f"`{k}={v}`" for k, v in r["change"].items()) or "none"
        bound = (1 - r["padding_fraction"]) / (1 - base["padding_fraction"])
        print(f"| {label} | {change} | {r['utterances_per_batch']:.1f} | {100 * r['padding_fraction']:.1f} % | "
              f"{r['audio_s_per_wall_s']:.2f} | {r['audio_s_per_cpu_s']:.2f} | "
              f"{r['audio_s_per_wall_s'] / base['audio_s_per_wall_s']:.2f}x / "
              f"{r['audio_s_per_cpu_s'] / base['audio_s_per_cpu_s']:.2f}x | {bound:.2f}x |")


@cli
def main(argv=None) -> int:
    args = get_parser().parse_args(argv)
    if not args.base.is_file():
        sys.exit(f"asr_speed: --base: file not found: {args.base}")
    for flag, value in (("--rounds", args.rounds), ("--train-steps", args.train_steps)):
        if value < 1:
            sys.exit(f"asr_speed: {flag} must be at least 1, got {value}")
    for split in args.splits:
        if not (SAMPLES_DIR / "LibriSpeech" / split).is_dir():
            sys.exit(f"asr_speed: --splits: no sample split {split!r} in {SAMPLES_DIR / 'LibriSpeech'}")
    if args.threads:
        torch.set_num_threads(args.threads)

    # Lightning takes ~30 s to import: --help and argument errors answer before it loads
    from lightning.pytorch import seed_everything
    from nemo.utils import logging as nemo_logging

    nemo_logging.setLevel(logging.ERROR)
    seed_everything(args.seed, verbose=False)
    started = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        manifests, tokenizer = sample_data(Path(tmp), args.splits)
        cfg = compose_small_config(tokenizer, manifests["train-clean"])
        entries = [e for split in args.splits for e in read_manifest(manifests[split])]
        paths = [e["audio_filepath"] for e in entries]
        audio_s = sum(float(e["duration"]) for e in entries)
        n_params = sum(p.numel() for p in build_model(cfg, args.seed).parameters())
        print(f"fastconformer_small, {n_params / 1e6:.1f} M parameters, random weights, CPU, "
              f"{torch.get_num_threads()} thread(s)", flush=True)
        print(f"transcription: {len(paths)} files of {', '.join(args.splits)}, {audio_s:.0f} s ...", flush=True)
        trans = transcription_speeds(cfg, paths, audio_s, args, Path(tmp))
        print(f"int8 WER change: {args.base} on test-clean ...", flush=True)
        wers = int8_wer(args.base, manifests["test-clean"], args.batch_size, Path(tmp))
        train = None
        if not args.skip_training:
            print(f"training: {args.warmup_steps} warm-up + {args.train_steps} timed steps per loader ...", flush=True)
            train = training_throughputs(cfg, args)
    print_tables(trans, wers, train, args, len(paths), audio_s)
    result = {"parameters": n_params, "threads": torch.get_num_threads(),
              "args": {k: str(v) for k, v in vars(args).items()}, "files": len(paths), "audio_s": audio_s,
              "transcription": trans, "int8_wer": wers, "training": train, "seconds": time.time() - started}
    if args.json:
        write_text_atomic(args.json, json.dumps(result, indent=2) + "\n")
    speedup = trans["ours_int8"]["rtfx_wall"] / trans["nemo"]["rtfx_wall"]
    onnx_speedup = trans["onnx_int8"]["rtfx_wall"] / trans["nemo"]["rtfx_wall"]
    line = (f"done in {result['seconds'] / 60:.1f} min: transcription {speedup:.2f}x NeMo's (int8, wall; target 2x), "
            f"ONNX int8 {onnx_speedup:.2f}x (target 3x)")
    if train:
        ours, nhwc, base = train["ours"], train["ours_nhwc"], train["nemo_default"]["audio_s_per_wall_s"]
        line += (f", training {ours['audio_s_per_wall_s'] / base:.2f}x with our data settings and "
                 f"{nhwc['audio_s_per_wall_s'] / base:.2f}x as the recipe trains on CPU (target 1.3x), "
                 f"{100 * ours['padding_fraction']:.1f} % padding (target <= 10 %)")
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
