"""CPU speed of GPT-2 124M (random weights, no download): KV-cache generation and dynamic padding.

Usage:
    python bench/slm_speed.py                      # defaults: ~2-4 minutes on 2 idle cores, ~11 at 1 thread on a busy one
    python bench/slm_speed.py --new-tokens 64 --train-steps 1     # quick look
    python bench/slm_speed.py --json experiments/bench/slm_speed.json

Two side-by-side measurements in one run, on the GPT2Config() defaults (124M: 12 x 768, 12 heads,
50257 tokens, 1024 context) with random weights -- speed does not depend on the weights:

1. Generation tokens/s, greedy, ``--new-tokens`` (256) new tokens after a ``--prompt-tokens`` prompt:
   ``model.generate`` with the KV cache vs a loop that re-runs the whole sequence for every new token
   (how the seed project generated). Target: >= 5x.
2. Training throughput in real (non-padding) tokens/s, forward + backward + AdamW step, on the
   lengths of the bundled Alpaca sample (template applied, byte-level BPE trained on it): batches
   built by transformers' LengthGroupedSampler and padded to their longest row (what the Trainer
   does with ``train.group_by_length``) vs every row padded to 1024 tokens.
Each figure is the median of ``--repeats`` timed runs after one warm-up. Few repeats keep the default
runtime short; on a busy machine raise ``--repeats``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from duet import SAMPLES_DIR
from duet.foundation.errors import cli
from duet.foundation.files import write_text_atomic
from slm.data import format_alpaca_example, load_alpaca


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--prompt-tokens", type=int, default=16)
    parser.add_argument("--train-batch", type=int, default=2, help="rows per training step")
    parser.add_argument("--train-steps", type=int, default=1, help="timed training steps per setting (after 1 warm-up)")
    parser.add_argument("--pad-to", type=int, default=1024, help="fixed length of the padded baseline")
    parser.add_argument("--repeats", type=int, default=1, help="timed repetitions of the generation runs")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    return parser


def timed(fn, repeats: int) -> float:
    fn()  # warm-up: allocator, kernels, lazy init
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def generation_speeds(model, prompt_tokens: int, new_tokens: int, repeats: int) -> dict:
    prompt = torch.randint(0, model.config.vocab_size, (1, prompt_tokens), generator=torch.Generator().manual_seed(0))

    def with_cache():
        with torch.no_grad():
            out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=new_tokens,
                                 min_new_tokens=new_tokens, do_sample=False, use_cache=True,
                                 pad_token_id=model.config.eos_token_id)
        assert out.shape[1] == prompt_tokens + new_tokens

    def rerun_whole_sequence():
        ids = prompt
        with torch.no_grad():
            for _ in range(new_tokens):
                next_id = model(ids, use_cache=False).logits[:, -1].argmax(-1, keepdim=True)
                ids = torch.cat([ids, next_id], dim=1)

    cached = timed(with_cache, repeats)
    uncached = timed(rerun_whole_sequence, repeats)
    return {"kv_cache_tok_s": new_tokens / cached, "no_cache_tok_s": new_tokens / uncached,
            "ratio": uncached / cached}


def sample_lengths() -> list[int]:
    """Token counts of the bundled sample's training texts (template + answer + EOS)."""
    # transformers takes ~2.6 s to import: --help and argument errors answer before it loads
    from slm.modeling import train_bpe_tokenizer

    rows = load_alpaca(str(SAMPLES_DIR / "alpaca_sample.json"))
    texts = [format_alpaca_example(r) for r in rows]
    tokenizer = train_bpe_tokenizer(texts, vocab_size=8000)
    return [len(ids) + 1 for ids in tokenizer(texts)["input_ids"]]


def training_speeds(model, lengths: list[int], batch_size: int, steps: int, pad_to: int) -> dict:
    # transformers takes ~2.6 s to import: --help and argument errors answer before it loads
    from transformers.trainer_pt_utils import LengthGroupedSampler

    order = list(LengthGroupedSampler(batch_size, lengths=lengths, generator=torch.Generator().manual_seed(0)))
    batches = [[lengths[i] for i in order[k:k + batch_size]] for k in range(0, batch_size * (steps + 1), batch_size)]
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    model.train()

    def run(pad_length_of) -> tuple[float, int, int]:
        real = padded = 0
        elapsed = 0.0
        for step, batch_lengths in enumerate(batches):
            width = pad_length_of(batch_lengths)
            ids = torch.randint(0, model.config.vocab_size, (len(batch_lengths), width))
            mask = torch.zeros_like(ids)
            for row, n in enumerate(batch_lengths):
                mask[row, :n] = 1
            labels = ids.masked_fill(mask == 0, -100)
            start = time.perf_counter()
            model(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            if step > 0:  # the first batch is the warm-up
                elapsed += time.perf_counter() - start
                real += sum(batch_lengths)
                padded += width * len(batch_lengths)
        return real / elapsed, real, padded

    dynamic, real_dyn, padded_dyn = run(max)
    fixed, real_fix, padded_fix = run(lambda _: pad_to)
    return {"dynamic_real_tok_s": dynamic, "padded_real_tok_s": fixed, "ratio": dynamic / fixed,
            "dynamic_padding_efficiency": real_dyn / padded_dyn, "fixed_padding_efficiency": real_fix / padded_fix}


@cli
def main(argv: list[str] | None = None) -> int:
    args = get_parser().parse_args(argv)
    # transformers takes ~2.6 s to import: --help and argument errors answer before it loads
    from transformers import GPT2Config, GPT2LMHeadModel

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config())
    model.eval()
    n_params = sum(p.numel() for p in model.parameters())
    print(f"GPT-2 {n_params / 1e6:.1f} M parameters, random weights, CPU, {torch.get_num_threads()} threads", flush=True)
    started = time.time()
    print(f"generation: {args.new_tokens} new tokens after {args.prompt_tokens} prompt tokens ...", flush=True)
    gen = generation_speeds(model, args.prompt_tokens, args.new_tokens, args.repeats)
    lengths = sample_lengths()
    print(f"training: batch {args.train_batch}, {args.train_steps} timed steps; sample rows {min(lengths)}-"
          f"{max(lengths)} tokens (mean {statistics.mean(lengths):.0f}) ...", flush=True)
    train = training_speeds(model, lengths, args.train_batch, args.train_steps, args.pad_to)

    rows = [("generation tok/s (greedy)", "re-run sequence", gen["no_cache_tok_s"], "KV cache", gen["kv_cache_tok_s"], gen["ratio"]),
            ("training real tok/s", f"pad to {args.pad_to}", train["padded_real_tok_s"], "length-grouped",
             train["dynamic_real_tok_s"], train["ratio"])]
    print(f"\n| measurement | baseline | tok/s | ours | tok/s | speed-up |\n|---|---|---:|---|---:|---:|")
    for name, base, base_speed, ours, our_speed, ratio in rows:
        print(f"| {name} | {base} | {base_speed:.1f} | {ours} | {our_speed:.1f} | {ratio:.1f}x |")
    print(f"\npadding efficiency (real / computed tokens): length-grouped {train['dynamic_padding_efficiency']:.2f}, "
          f"pad to {args.pad_to} {train['fixed_padding_efficiency']:.3f}")
    result = {"parameters": n_params, "threads": torch.get_num_threads(), "args": {k: str(v) for k, v in vars(args).items()},
              "generation": gen, "training": train, "seconds": time.time() - started}
    if args.json:
        write_text_atomic(args.json, json.dumps(result, indent=2) + "\n")
    print(f"done in {result['seconds']:.0f} s: KV cache {gen['ratio']:.1f}x faster generation, "
          f"length grouping {train['ratio']:.1f}x more real training tokens/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
