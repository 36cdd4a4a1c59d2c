#!/usr/bin/env python
"""Run the whole duet toolkit end to end on the bundled sample, offline, on CPU.

Usage:
  python tools/demo.py                 # every stage; finished stages with unchanged inputs are skipped
  python tools/demo.py --list          # the stages and the exact command each one runs
  python tools/demo.py --only tokenizer
  python tools/demo.py --from tokenizer

Each stage is one of the toolkit's own entry scripts, run as a user would run it (the command is
printed first), so the demo doubles as a walkthrough. Outputs go to manifests/, tokenizers/ and
exp/ (all git-ignored). Ends with a summary table.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

REPO_ROOT = Path(__file__).resolve().parent.parent
# The report's 1024 pieces also train on the sample's 520 sentences, but then most pieces are whole
# words seen a handful of times; a CTC decoder learns a smaller inventory from 20 minutes of audio faster.
DEMO_VOCAB_SIZE = 256


@dataclass
class Stage:
    name: str
    command: list[str]
    summarize: Callable[[], str]


def count_lines(path: Path) -> int:
    return sum(1 for _ in open(path, encoding="utf-8")) if path.exists() else 0


def manifest_summary() -> str:
    parts = []
    for split in ("train-clean", "dev-clean", "test-clean"):
        path = REPO_ROOT / "manifests" / f"{split}.json"
        hours = sum(json.loads(line)["duration"] for line in open(path)) / 3600 if path.exists() else 0.0
        parts.append(f"{split} {count_lines(path)} utts/{hours * 60:.1f} min")
    return ", ".join(parts)


def tokenizer_summary() -> str:
    vocab = REPO_ROOT / "tokenizers" / f"spe_bpe_v{DEMO_VOCAB_SIZE}" / "tokenizer.vocab"
    return f"{count_lines(vocab)} BPE pieces in {vocab.parent.relative_to(REPO_ROOT)}/"


def stages() -> list[Stage]:
    py = sys.executable
    return [
        Stage("manifests", [py, "tools/make_manifest.py"], manifest_summary),
        Stage("tokenizer", [py, "tools/train_tokenizer.py", "--manifests", "manifests/train-clean.json",
                            "--vocab-size", str(DEMO_VOCAB_SIZE)], tokenizer_summary),
    ]


def main(argv: list[str] | None = None) -> int:
    all_stages = stages()
    names = [s.name for s in all_stages]
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="+", choices=names, help="run just these stages")
    parser.add_argument("--from", dest="start", choices=names, help="start at this stage")
    parser.add_argument("--list", action="store_true", help="print the stages and their commands")
    args = parser.parse_args(argv)
    if args.list:
        for stage in all_stages:
            print(f"{stage.name:12s} {' '.join(Path(c).name if c == sys.executable else c for c in stage.command)}")
        return 0
    selected = [s for s in all_stages if (not args.only or s.name in args.only)]
    if args.start:
        selected = selected[names.index(args.start):]

    rows = []
    demo_start = time.time()
    for stage in selected:
        shown = " ".join(["python"] + stage.command[1:])
        print(f"\n=== {stage.name}: {shown}", flush=True)
        start = time.time()
        result = subprocess.run(stage.command, cwd=REPO_ROOT)
        seconds = time.time() - start
        if result.returncode != 0:
            print(f"\ndemo: stage {stage.name!r} failed (exit {result.returncode}); fix it and resume with "
                  f"python tools/demo.py --from {stage.name}", file=sys.stderr)
            return result.returncode
        rows.append((stage.name, f"{seconds:.0f} s", stage.summarize()))

    print("\n=== summary")
    width = max(len(r[0]) for r in rows)
    for name, seconds, summary in rows:
        print(f"{name:<{width}}  {seconds:>6}  {summary}")
    print(f"demo: {len(rows)} stage(s) done in {time.time() - demo_start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
