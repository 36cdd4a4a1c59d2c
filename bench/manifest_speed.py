#!/usr/bin/env python
"""Manifest build speed: duet's header-only FLAC reading vs sox conversion per file.

Usage:
  python bench/manifest_speed.py                     # 28,000 files, reference timed on 2,000 of them
  python bench/manifest_speed.py --files 5000 --reference-files 0   # reference on every file

Builds a LibriSpeech-shaped tree (<split>/<spk>/<chap>/<spk>-<chap>-<utt>.flac + trans.txt, like
train-clean-100's 28,539 files) in a temporary folder, then times, side by side:
  ours       python tools/make_manifest.py on the tree (the real entry point, process start included):
             FLAC read in place, duration from the header, probed in --jobs processes;
  reference  what NeMo's scripts/dataset_processing/get_librispeech_data.py does per utterance:
             convert flac -> wav with sox, then ask `soxi -D` for the duration, transcripts processed
             in a process pool of the same size.
The reference takes minutes for 28 k files, so by default it runs on a random subset and its per-file
time is scaled to the whole tree (printed as such). Prints both times and the ratio.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import soundfile

from duet.errors import DuetError
from duet.foundation.errors import cli

REPO_ROOT = Path(__file__).resolve().parent.parent
FILES_PER_CHAPTER = 56


def build_tree(split_dir: Path, n_files: int, seed: int = 0) -> list[Path]:
    """Write n_files FLACs (byte copies of 40 distinct 1-4 s clips) with their transcripts."""
    rng = np.random.default_rng(seed)
    clips = []
    for i in range(40):
        seconds = 1.0 + 3.0 * i / 40
        wave = (0.1 * rng.standard_normal(int(16000 * seconds))).astype(np.float32)
        tmp = split_dir.parent / f"clip{i}.flac"
        soundfile.write(tmp, wave, 16000, subtype="PCM_16")
        clips.append(tmp.read_bytes())
        tmp.unlink()
    paths = []
    chapters = (n_files + FILES_PER_CHAPTER - 1) // FILES_PER_CHAPTER
    for c in range(chapters):
        speaker, chapter = 100 + c // 2, 1000 + c
        chapter_dir = split_dir / str(speaker) / str(chapter)
        chapter_dir.mkdir(parents=True)
        lines = []
        for u in range(min(FILES_PER_CHAPTER, n_files - len(paths))):
            utt_id = f"{speaker}-{chapter}-{u:04d}"
            path = chapter_dir / f"{utt_id}.flac"
            path.write_bytes(clips[len(paths) % len(clips)])
            paths.append(path)
            lines.append(f"{utt_id} SOME WORDS FOR UTTERANCE NUMBER {u}\n")
        (chapter_dir / f"{speaker}-{chapter}.trans.txt").write_text("".join(lines))
    return paths


def reference_one(job: tuple[str, str]) -> float:
    """flac -> wav with sox, then soxi -D for the duration (the reference script's per-file work)."""
    flac, wav = job
    subprocess.run(["sox", flac, wav], check=True)
    return float(subprocess.check_output(["soxi", "-D", wav]))


@cli
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=28000)
    parser.add_argument("--reference-files", type=int, default=2000, help="0 = all files")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)
    if not shutil.which("sox") or not shutil.which("soxi"):
        raise DuetError("the reference path needs sox/soxi (apt-get install sox)")

    with tempfile.TemporaryDirectory(prefix="manifest_bench.") as tmp:
        split = Path(tmp) / "LibriSpeech" / "train-clean-100"
        split.mkdir(parents=True)
        start = time.time()
        paths = build_tree(split, args.files)
        print(f"tree: {len(paths)} FLAC files in {time.time() - start:.1f} s ({split})")

        start = time.time()
        subprocess.run([sys.executable, str(REPO_ROOT / "tools/make_manifest.py"), "--data-root", str(split),
                        "--out-dir", str(Path(tmp) / "manifests"), "--jobs", str(args.jobs)],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        ours_s = time.time() - start
        n_lines = sum(1 for _ in open(Path(tmp) / "manifests" / "train-clean-100.json"))
        assert n_lines == len(paths), f"manifest has {n_lines} lines for {len(paths)} files"

        subset = paths if args.reference_files <= 0 else random.Random(0).sample(paths, min(args.reference_files, len(paths)))
        wav_dir = Path(tmp) / "wav"
        wav_dir.mkdir()
        jobs = [(str(p), str(wav_dir / (p.stem + ".wav"))) for p in subset]
        start = time.time()
        with ProcessPoolExecutor(max_workers=args.jobs) as pool:
            list(pool.map(reference_one, jobs, chunksize=16))
        ref_subset_s = time.time() - start
        ref_s = ref_subset_s * len(paths) / len(subset)

    scaled = "" if len(subset) == len(paths) else f" (measured {ref_subset_s:.1f} s on {len(subset)} files, scaled)"
    print(f"{'path':<11}{'files':>8}{'seconds':>10}{'files/s':>10}")
    print(f"{'ours':<11}{len(paths):>8}{ours_s:>10.1f}{len(paths) / ours_s:>10.0f}")
    print(f"{'reference':<11}{len(paths):>8}{ref_s:>10.1f}{len(paths) / ref_s:>10.0f}{scaled}")
    print(f"speed-up: {ref_s / ours_s:.1f}x ({args.jobs} processes each, {os.cpu_count()} cores)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
