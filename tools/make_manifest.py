#!/usr/bin/env python
r"""Build NeMo JSONL manifests from a LibriSpeech-style corpus, one per split.

Usage:
  # the bundled synthetic corpus samples/LibriSpeech -> manifests/{train,dev,test}-clean.json
  python tools/make_manifest.py

  # a real LibriSpeech download (folder holding train-clean-100/, dev-clean/, ...)
  python tools/make_manifest.py --data-root /data/LibriSpeech --splits train-clean-100 dev-clean test-clean

  # fetch splits from OpenSLR first (MD5-verified, resumed after a dropped connection), into data/LibriSpeech/
  python tools/make_manifest.py --download dev-clean test-clean

  # ... into a corpus root of your own (splits already there are not fetched again), from a mirror
  python tools/make_manifest.py --download train-clean-100 --data-root /data/LibriSpeech \
      --base-url https://us.openslr.org/resources/12

  # any folder of audio + LibriSpeech-style <spk>-<chap>.trans.txt files is one split
  python tools/make_manifest.py --data-root my_recordings/ --out-dir manifests/

  # also carve a dev set of 8 whole speakers: <split>.json (all), <split>.train.json, <split>.dev.json
  python tools/make_manifest.py --data-root ../shared/real_speech/speechocean762 --splits train \
      --out-dir data/speechocean762 --dev-speakers 8

Each line: {"audio_filepath": <absolute>, "duration": <s>, "text": <lower case>}. Audio is read in
place (FLAC or WAV, 16 kHz mono), durations come from the file headers. Utterances that cannot be used
(missing audio or transcript, corrupt/empty file, wrong rate or channels, empty or non-UTF-8 text,
duplicate id, duration out of range) are listed by id with the reason in <split>.skipped.tsv beside
the manifest and skipped; --strict makes any of them an error. Manifests are written atomically, and a
re-run with unchanged files and options does nothing (--force rebuilds).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from tqdm import tqdm

from duet import SAMPLES_DIR
from duet.errors import DuetError
from duet.data.librispeech import (
    ARCHIVE_MD5, BASE_URL_ENV, OPENSLR_BASE_URL, DownloadSettings, extract_split, fetch_archive, read_md5sums,
)
from duet.data.manifest import (
    MANIFEST_DIR, ManifestOptions, build_split_manifest, find_splits, hold_out_speakers, manifest_is_current,
    split_fingerprint, spread_subset, stamp_path, write_manifest,
)
from duet.foundation import REPO_ROOT
from duet.foundation.errors import cli
from duet.foundation.files import write_text_atomic

MAX_PROBLEMS_SHOWN = 10


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-root", type=Path, default=None,
                        help="corpus root holding split folders, or one split folder (default: samples/LibriSpeech); "
                             "with --download, the corpus root the splits are extracted into "
                             "(default: <download-dir>/LibriSpeech)")
    parser.add_argument("--splits", nargs="+", default=None, help="split folder names (default: all found)")
    parser.add_argument("--out-dir", type=Path, default=MANIFEST_DIR, help="where <split>.json goes")
    parser.add_argument("--download", nargs="+", default=None, metavar="SPLIT", choices=sorted(ARCHIVE_MD5),
                        help="download these LibriSpeech splits (unless already extracted under the corpus "
                             "root) before building")
    parser.add_argument("--download-dir", type=Path, default=REPO_ROOT / "data",
                        help="archives (and partial downloads, resumed by the next run) go here; audio to "
                             "<download-dir>/LibriSpeech/<split> unless --data-root is given")
    parser.add_argument("--base-url", default=os.environ.get(BASE_URL_ENV) or OPENSLR_BASE_URL,
                        help=f"where <split>.tar.gz is fetched from (default: ${BASE_URL_ENV} if set, "
                             f"else {OPENSLR_BASE_URL})")
    parser.add_argument("--md5sums", default=None, metavar="FILE_OR_URL",
                        help="md5sum-format list ('<md5>  <split>.tar.gz' lines) replacing the published "
                             "checksums, for a mirror that repacked the archives")
    parser.add_argument("--min-duration", type=float, default=ManifestOptions.min_duration, help="seconds")
    parser.add_argument("--max-duration", type=float, default=ManifestOptions.max_duration, help="seconds")
    parser.add_argument("--sample-rate", type=int, default=ManifestOptions.sample_rate,
                        help="required sample rate in Hz; other rates are skipped (resample first)")
    parser.add_argument("--verify-audio", action="store_true",
                        help="decode every file completely to catch truncated streams (slower)")
    parser.add_argument("--strict", action="store_true", help="fail on the first split with any problem")
    parser.add_argument("--force", action="store_true", help="rebuild even if the manifest is up to date")
    parser.add_argument("--max-utterances", type=int, default=None, metavar="N",
                        help="keep at most N utterances per split, spread evenly over it (a small fixed sample)")
    parser.add_argument("--dev-speakers", type=int, default=0, metavar="N",
                        help="also write <split>.train.json and <split>.dev.json, the latter holding N whole "
                             "speakers spread over the sorted speaker ids (default 0: no dev carve)")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes probing audio")
    return parser


def download(splits: list[str], download_dir: Path, corpus_root: Path, settings: DownloadSettings) -> None:
    """Fetch and extract each split that ``corpus_root`` does not hold yet."""
    for split in splits:
        if (corpus_root / split).is_dir():
            print(f"{split}: already extracted in {corpus_root}, not downloaded")
            continue
        archive = fetch_archive(split, download_dir, settings)
        print(f"{split}: {archive} (MD5 verified), extracting ...")
        extract_split(archive, corpus_root)


@cli
def main(argv: list[str] | None = None) -> int:
    parser = get_parser()
    args = parser.parse_args(argv)
    if args.max_utterances is not None and args.max_utterances < 1:
        parser.error(f"--max-utterances must be at least 1, got {args.max_utterances}")
    if args.md5sums and not args.download:
        parser.error("--md5sums is only used with --download")
    options = ManifestOptions(args.min_duration, args.max_duration, args.sample_rate, args.verify_audio)
    if args.download:
        args.data_root = args.data_root or args.download_dir / "LibriSpeech"
        md5 = read_md5sums(args.md5sums) if args.md5sums else ARCHIVE_MD5
        download(args.download, args.download_dir, args.data_root, DownloadSettings(args.base_url, md5))
        args.splits = args.splits or args.download
    data_root = args.data_root or SAMPLES_DIR / "LibriSpeech"
    if not data_root.is_dir():
        raise DuetError(f"data root {data_root} is not a folder")
    found = {d.name: d for d in find_splits(data_root)}
    wanted = args.splits or sorted(found)
    missing = [s for s in wanted if s not in found]
    if missing or not wanted:
        raise DuetError(f"no split {', '.join(missing) or 'at all'} under {data_root} "
                        f"(found: {', '.join(sorted(found)) or 'none'})")

    start = time.time()
    totals = {"files": 0, "hours": 0.0, "skipped": 0, "current": 0}
    for split in wanted:
        out_path = args.out_dir / f"{split}.json"
        fingerprint = split_fingerprint(found[split], options)
        if args.dev_speakers:  # the carve and the sample are part of what a re-run must reproduce
            fingerprint += f" dev-speakers={args.dev_speakers}"
        if args.max_utterances:
            fingerprint += f" max-utterances={args.max_utterances}"
        if not args.force and manifest_is_current(out_path, fingerprint):
            print(f"{split}: {out_path} is up to date (same files and options), skipped")
            totals["current"] += 1
            continue
        manifest = build_split_manifest(
            found[split], options, jobs=args.jobs,
            progress=lambda it, n: tqdm(it, total=n, desc=split, unit="file", mininterval=1.0),
        )
        for problem in manifest.problems[:MAX_PROBLEMS_SHOWN]:
            print(f"  skipped {problem}", file=sys.stderr)
        report_path = args.out_dir / f"{split}.skipped.tsv"
        if manifest.problems:
            more = len(manifest.problems) - MAX_PROBLEMS_SHOWN
            if more > 0:
                print(f"  ... and {more} more, all listed in {report_path}", file=sys.stderr)
            if args.strict:
                print(f"error: {split}: {len(manifest.problems)} unusable utterance(s) with --strict; "
                      "no manifest written", file=sys.stderr)
                return 1
        if not manifest.entries:
            print(f"error: {split}: no usable utterance under {found[split]}", file=sys.stderr)
            return 1
        write_text_atomic(report_path, "".join(f"{p.item}\t{p.reason}\n" for p in manifest.problems))
        if args.max_utterances:
            manifest.entries = spread_subset(manifest.entries, args.max_utterances)
        try:
            carved = hold_out_speakers(manifest.entries, args.dev_speakers) if args.dev_speakers else None
        except ValueError as e:
            raise DuetError(f"{split}: --dev-speakers: {e}") from e
        write_manifest(out_path, manifest.entries)
        if carved:
            for part, entries in zip(("train", "dev"), carved):
                write_manifest(args.out_dir / f"{split}.{part}.json", entries)
            print(f"{split}: {args.dev_speakers} speakers ({len(carved[1])} utterances) held out -> "
                  f"{args.out_dir / f'{split}.dev.json'}, the rest -> {args.out_dir / f'{split}.train.json'}")
        write_text_atomic(stamp_path(out_path), fingerprint + "\n")
        print(f"{split}: {len(manifest.entries)} utterances, {manifest.hours:.2f} h, "
              f"{len(manifest.problems)} skipped -> {out_path}")
        totals["files"] += len(manifest.entries)
        totals["hours"] += manifest.hours
        totals["skipped"] += len(manifest.problems)
    up_to_date = f" ({totals['current']} already up to date)" if totals["current"] else ""
    print(f"done: {len(wanted)} split(s){up_to_date}; built {totals['files']} utterances, {totals['hours']:.2f} h, "
          f"{totals['skipped']} skipped, {time.time() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
