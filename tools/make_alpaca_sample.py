"""Write samples/alpaca_sample.json: a deterministic Alpaca-format instruction set for the offline preset.

Usage:
    python tools/make_alpaca_sample.py                      # writes samples/alpaca_sample.json
    python tools/make_alpaca_sample.py --out /tmp/a.json --seed 7
    python tools/make_alpaca_sample.py --tool-rows 5000 --out data/tool_rows.json   # only rows with a tool call or a
                                                            # refusal, for data.tool_rows of configs/slm_gpt2_alpaca.yaml

The rows and how they are made: duet/synth/alpaca_sample.py.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from duet import SAMPLES_DIR
from duet.synth.alpaca_sample import make_examples, tool_examples
from duet.foundation.errors import cli
from duet.foundation.files import write_text_atomic


@cli
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=None, help="default: samples/alpaca_sample.json (not with --tool-rows)")
    parser.add_argument("--num-examples", type=int, default=4000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tool-rows", type=int, default=None, metavar="N",
                        help="write N rows answered with a tool call or a refusal instead (--num-examples unused)")
    args = parser.parse_args(argv)
    if args.tool_rows is not None and args.tool_rows < 1:
        parser.error(f"--tool-rows must be >= 1, got {args.tool_rows}")
    if args.tool_rows is not None and args.out is None:
        parser.error("--tool-rows needs --out: the default is the bundled sample")
    args.out = args.out or SAMPLES_DIR / "alpaca_sample.json"
    examples = make_examples(args.num_examples, args.seed) if args.tool_rows is None else \
        tool_examples(args.tool_rows, args.seed)
    write_text_atomic(args.out, json.dumps(examples, indent=1, ensure_ascii=False) + "\n")
    with_input = sum(1 for e in examples if e["input"])
    print(f"wrote {len(examples)} examples ({with_input} with an input field) to {args.out} "
          f"({args.out.stat().st_size / 1024:.0f} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
