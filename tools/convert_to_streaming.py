#!/usr/bin/env python
r"""Turn an offline FastConformer-CTC .nemo into a cache-aware streaming one, to fine-tune for streaming.

Usage:
  python tools/convert_to_streaming.py samples/checkpoints/fastconformer_tiny_base.nemo experiments/base_streaming.nemo
  python tools/convert_to_streaming.py base.nemo out.nemo --att-context-size 70 13     # 1.04 s look-ahead

  # then fine-tune it through the usual recipe (its own architecture is kept) and compare:
  python nemo_recipes/finetune_ctc.py --config-name fastconformer_tiny name=streaming_ft \
      init_from_nemo_model=experiments/base_streaming.nemo model.train_ds.manifest_filepath=... ...
  python nemo_recipes/evaluate_ctc.py --model experiments/streaming_ft/streaming_ft.nemo --manifest ... --stream

The encoder gets the streaming keys of configs/fastconformer_small_streaming.yaml (causal subsampling,
causal depthwise convolutions with layer norm, chunked-limited attention [left, right]); weights carry
over wherever their shapes allow (duet.asr.streaming.convert_to_streaming). The result sees less context
than the offline model was trained with, so it is worse until fine-tuned. Prints the tensors that start
fresh and the look-ahead the attention context implies.
"""

import argparse
import sys
from pathlib import Path

from duet.asr.streaming import convert_to_streaming, streaming_latency
from duet.foundation.files import add_log_arguments, log_target
from duet.foundation.errors import cli
from duet.foundation.files import library_output_to


@cli
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model", type=Path, help="offline FastConformer/Conformer-CTC .nemo")
    parser.add_argument("out", type=Path, help="where the streaming .nemo goes")
    parser.add_argument("--att-context-size", type=int, nargs=2, metavar=("LEFT", "RIGHT"), default=None,
                        help="attention context in encoder frames (default: the streaming config's [70, 6])")
    add_log_arguments(parser, "convert_to_streaming")
    args = parser.parse_args(argv)
    with library_output_to(log_target(args)):  # NeMo's lines
        model, fresh = convert_to_streaming(args.model, args.out, args.att_context_size)
    print(f"convert_to_streaming: {len(fresh)} encoder tensors start fresh: {', '.join(fresh) or 'none'}")
    print(f"convert_to_streaming: {streaming_latency(model).describe()}; wrote {args.out} (fine-tune it before use)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
