"""Write samples/alpaca_sample.json: a deterministic Alpaca-format instruction set for the offline preset.

Usage:
    python tools/make_alpaca_sample.py                      # writes samples/alpaca_sample.json
    python tools/make_alpaca_sample.py --out /tmp/a.json --seed 7

The rows and how they are made: duet/synth/alpaca_sample.py.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from duet import SAMPLES_DIR
from duet.synth.alpaca_sample import make_examples
from duet.foundation.errors import cli
from duet.foundation.files import write_text_atomic


@cli
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=SAMPLES_DIR / "alpaca_sample.json")
    parser.add_argument("--num-examples", type=int, default=4000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    examples = make_examples(args.num_examples, args.seed)
    write_text_atomic(args.out, json.dumps(examples, indent=1, ensure_ascii=False) + "\n")
    with_input = sum(1 for e in examples if e["input"])
    print(f"wrote {len(examples)} examples ({with_input} with an input field) to {args.out} "
          f"({args.out.stat().st_size / 1024:.0f} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
