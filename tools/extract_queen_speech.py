#!/usr/bin/env python
r"""Write the ~4.6 h of voice-acted dialogue of Flight of the Amazon Queen as 16 kHz FLAC files, to pseudo-label.

Usage:
  # the game's data file from Debian main, unpacked without installing it (no root needed)
  apt-get download flight-of-the-amazon-queen && dpkg-deb -x flight-of-the-amazon-queen_*.deb data/fotaq_deb
  python tools/extract_queen_speech.py data/fotaq_deb/usr/share/scummvm/flight-of-the-amazon-queen/queen.1c \
      --out data/fotaq/audio --join-seconds 20
  #   -> data/fotaq/audio/<scene>/<first line>+<more lines>.flac (an interrupted run goes on where it stopped)

  # then label it with Whisper tiny.en (no transcripts ship with the game)
  python tools/pseudo_label.py data/fotaq/audio --out data/fotaq/pseudo.json

The lines are MP3 at 11,025 Hz inside the game's container; they are resampled to the 16 kHz the models read
(what lies above 5.5 kHz stays empty). The folder keeps the settings it was made with and refuses others. The
game's content is not ours: its credit and licence are in README.md, "Credits and licences of the data".
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from duet.errors import DuetError
from duet.foundation.errors import cli
from duet.queen_speech import DEBIAN_CONTAINER, MAX_JOIN_SECONDS, extract
from duet.stage_progress import count_printer


_PROGRESS = count_printer(500, "lines")


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("container", type=Path, nargs="?", default=DEBIAN_CONTAINER,
                        help=f"the game's queen.1c (default: where the Debian package installs it, {DEBIAN_CONTAINER})")
    parser.add_argument("--out", type=Path, required=True, help="folder for the FLAC files")
    parser.add_argument("--join-seconds", type=float, default=0.0,
                        help=f"join consecutive lines of a scene into files up to this long, at most "
                             f"{MAX_JOIN_SECONDS:g} (default 0: a file a line); Whisper reads 30 s per pass whatever "
                             f"the length, so 20 labels ~8x faster")
    return parser


@cli
def main(argv: list[str] | None = None) -> int:
    args = get_parser().parse_args(argv)
    start = time.time()
    if args.container == DEBIAN_CONTAINER and not DEBIAN_CONTAINER.is_file():
        raise DuetError(f"{DEBIAN_CONTAINER} not found: install the Debian package flight-of-the-amazon-queen, or "
                        f"unpack it and name its queen.1c (see --help)")
    files, lines, seconds, failed = extract(args.container, args.out, join_seconds=args.join_seconds,
                                            progress=_PROGRESS)
    for problem in failed:
        print(f"extract_queen_speech: skipped {problem}", file=sys.stderr)
    print(f"extract_queen_speech: {lines} lines in {files} files, {seconds / 3600:.2f} h of speech -> {args.out} "
          f"({len(failed)} skipped) in {time.time() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
