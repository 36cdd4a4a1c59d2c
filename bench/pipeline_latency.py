#!/usr/bin/env python
r"""Per-stage latency of the voice -> answer pipeline on CPU, models already loaded.

Usage:
  python bench/pipeline_latency.py               # needs the demo's models (python tools/demo.py)
  python bench/pipeline_latency.py --repeats 9 --seconds 5

One clip of about --seconds of real (synthetic-voice) speech, built from held-out sample utterances,
goes through duet.pipeline.VoicePipeline --repeats times after one warm-up run; the table shows the
median of each stage for two model pairs side by side:
  tiny        the demo's fine-tuned CTC model (the Whisper base's) and tiny GPT-2 (real answers, stop at EOS)
  full-size   fastconformer_small (16 x 176, ~12.8 M) + GPT-2 124M, both with random weights (speed
              does not depend on the weights). Random weights never emit EOS, so the language model
              is made to produce exactly as many tokens as the tiny model's answer had.
The ASR decoding is greedy unless --asr-decoding says otherwise (the demo's pipeline stage uses beam search
+ the demo's token LM: pass the same options to time that; the full-size model is built over the tiny ASR model's
own tokenizer, so the one LM fits both). The language model decodes as tools/pipeline.py's does, with the same flags and defaults
(slm.generation: --strategy, --max-new-tokens, --repetition-penalty, ...). Targets from the issue: <= 0.5 s to the transcript, <= 1 s to the whole tiny-model answer.

  python bench/pipeline_latency.py --asr-decoding beam_lm --beam-size 8 \
      --lm experiments/demo_lm/lm_text_token6.arpa --alpha 1.1 --beta 4
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import soundfile
import torch
from hydra import compose, initialize_config_dir

from duet.asr.decoding import build_decoder
from duet.cli.cli_args import add_decoding_arguments, decoding_settings_from_args
from duet.demo.models import DEMO_ASR_MODEL, default_slm_model
from duet.errors import DuetError
from duet.data.manifest import read_manifest
from duet.pipeline import PipelineSettings, VoicePipeline
from duet.data.tokenizer import nemo_tokenizer_folder
from duet.foundation import REPO_ROOT, python_command
from duet.foundation.errors import cli
from slm.generation import add_generation_arguments, generation_settings_from_args


TEST_MANIFEST = REPO_ROOT / "manifests" / "test-clean.json"


def make_clip(seconds: float, out: Path, manifest: Path = TEST_MANIFEST) -> Path:
    """Concatenate held-out test-clean utterances (0.3 s apart) to about ``seconds`` of audio."""
    parts, total = [], 0.0
    for entry in read_manifest(manifest):
        if total >= seconds:
            break
        audio, sr = soundfile.read(entry["audio_filepath"], dtype="float32")
        parts += [audio, np.zeros(int(0.3 * sr), dtype=np.float32)]
        total += entry["duration"] + 0.3
    clip = np.concatenate(parts)[: int(seconds * sr)]
    soundfile.write(out, clip, sr)
    return out


def full_size_models(tokenizer_dir: Path, slm_tokenizer):
    # NeMo takes ~21 s to import: --help and argument errors answer before it loads
    from nemo.collections.asr.models import EncDecCTCModelBPE
    from transformers import GPT2Config, GPT2LMHeadModel

    with initialize_config_dir(config_dir=str(REPO_ROOT / "configs"), version_base=None):
        cfg = compose("fastconformer_small", [f"model.tokenizer.dir={tokenizer_dir}",
                                              "model.train_ds.manifest_filepath=null",
                                              "model.validation_ds.manifest_filepath=null",
                                              "model.test_ds.manifest_filepath=null"])
    asr = EncDecCTCModelBPE(cfg.model).eval()
    torch.manual_seed(0)
    slm = GPT2LMHeadModel(GPT2Config(vocab_size=max(50257, len(slm_tokenizer)))).eval()
    return asr, slm


def measure(pipeline: VoicePipeline, clip: Path, repeats: int) -> dict[str, float]:
    pipeline.run(clip)  # warm-up: first calls allocate and pick kernels
    runs = [pipeline.run(clip) for _ in range(repeats)]
    stages = runs[0].latency_s.keys()
    medians = {stage: statistics.median(r.latency_s[stage] for r in runs) for stage in stages}
    medians["to_transcript"] = statistics.median(r.latency_s["audio_load"] + r.latency_s["asr"] for r in runs)
    medians["answer"] = runs[-1].response or ""
    medians["transcript"] = runs[-1].transcript or ""
    return medians


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--asr-model", type=Path, default=DEMO_ASR_MODEL)
    parser.add_argument("--slm-model", type=Path, default=default_slm_model())
    parser.add_argument("--asr-tokenizer", type=Path, default=None,
                        help="tokenizer folder for the full-size ASR model (default: --asr-model's own, so that one "
                             "token LM fits both)")
    parser.add_argument("--manifest", type=Path, default=TEST_MANIFEST,
                        help="held-out utterances the clip is cut from (default: the sample's test-clean)")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    add_decoding_arguments(parser, "--asr-decoding")
    add_generation_arguments(parser)
    return parser


@cli
def main(argv: list[str] | None = None) -> int:
    parser = get_parser()
    args = parser.parse_args(argv)
    for flag, value, low in (("--seconds", args.seconds, 0.5), ("--repeats", args.repeats, 1),
                             ("--threads", args.threads, 1)):
        if value < low:
            parser.error(f"{flag} must be >= {low:g}, got {value:g}")
    asr_decoding = decoding_settings_from_args(args, "--asr-decoding")
    generation = generation_settings_from_args(args)
    for flag, path in (("--asr-model", args.asr_model), ("--slm-model", args.slm_model),
                       ("--asr-tokenizer", args.asr_tokenizer)):
        if path is not None and not path.exists():
            raise DuetError(f"{flag} {path} not found: run {python_command('tools/demo.py')} first (or pass {flag})")
    if not args.manifest.is_file():
        raise DuetError(f"--manifest {args.manifest} not found: run {python_command('tools/make_manifest.py')} "
                        "(or tools/demo.py)")
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        clip = make_clip(args.seconds, Path(tmp) / "clip.flac", args.manifest)
        # min_confidence 0: every stage is timed, the language model answering however unsure the transcript
        settings = PipelineSettings(asr_model=args.asr_model, slm_model=args.slm_model, asr_decoding=asr_decoding,
                                    generation=generation, min_confidence=0.0)
        tiny, load_s = VoicePipeline.load(settings)
        tokenizer = args.asr_tokenizer or nemo_tokenizer_folder(args.asr_model, Path(tmp) / "asr_tokenizer")
        big_asr, big_slm = full_size_models(tokenizer, tiny.slm_tokenizer)
        # before any timing: an LM that does not fit (or a model that does not load) is a one-line error here
        big_decoder = build_decoder(big_asr, asr_decoding)
        results = {"tiny": measure(tiny, clip, args.repeats)}
        answer_tokens = len(tiny.slm_tokenizer(results["tiny"]["answer"])["input_ids"]) + 1  # + EOS

        fixed = replace(generation, max_new_tokens=answer_tokens)
        big = VoicePipeline(big_asr, big_slm, tiny.slm_tokenizer, replace(settings, generation=fixed), big_decoder)
        # Random weights would stop at a random EOS, or never: pin the answer length instead.
        big_slm.generation_config.min_new_tokens = answer_tokens
        results["full-size"] = measure(big, clip, args.repeats)

    params = {"tiny": (sum(p.numel() for p in tiny.asr_model.parameters()), tiny.slm_model.num_parameters()),
              "full-size": (sum(p.numel() for p in big_asr.parameters()), big_slm.num_parameters())}
    print(f"clip: {args.seconds:.1f} s of held-out sample speech; median of {args.repeats} runs after a warm-up; "
          f"{args.threads} threads; ASR decoding {asr_decoding.describe()}; tiny models loaded in {load_s:.1f} s")
    print(f"tiny transcript: {results['tiny']['transcript']!r}")
    print(f"tiny answer ({answer_tokens} tokens incl. EOS): {results['tiny']['answer']!r}")
    header = f"{'models':<10}{'ASR params':>12}{'SLM params':>12}{'audio':>8}{'ASR':>8}{'SLM':>8}{'to text':>9}{'total':>8}"
    print(header)
    for name, r in results.items():
        asr_p, slm_p = params[name]
        print(f"{name:<10}{asr_p / 1e6:>11.1f}M{slm_p / 1e6:>11.1f}M{r['audio_load']:>7.3f}s{r['asr']:>7.3f}s"
              f"{r['slm']:>7.3f}s{r['to_transcript']:>8.3f}s{r['total']:>7.3f}s")
    ratio = results["full-size"]["total"] / results["tiny"]["total"]
    print(f"full-size / tiny total latency: {ratio:.1f}x; targets: transcript <= 0.5 s "
          f"(tiny {results['tiny']['to_transcript']:.3f} s, full {results['full-size']['to_transcript']:.3f} s), "
          f"tiny answer <= 1 s (tiny {results['tiny']['total']:.3f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
