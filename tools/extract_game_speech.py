#!/usr/bin/env python
r"""Write the voice-acted dialogue of a freeware game from Debian main as 16 kHz FLAC files, to pseudo-label.

Usage:
  # Flight of the Amazon Queen (~4.6 h, its cast's lines as MP3 inside queen.1c), unpacked without installing it
  apt-get download flight-of-the-amazon-queen && dpkg-deb -x flight-of-the-amazon-queen_*.deb data/fotaq_deb
  python tools/extract_game_speech.py queen \
      data/fotaq_deb/usr/share/scummvm/flight-of-the-amazon-queen/queen.1c --out data/fotaq/audio --join-seconds 20
  #   -> data/fotaq/audio/<scene>/<first line>+<more lines>.flac (an interrupted run goes on where it stopped)

  # Drascula (~49 min, a dozen voices, raw 8-bit files in its en/ folder)
  apt-get download drascula && dpkg-deb -x drascula_*.deb data/drascula_deb
  python tools/extract_game_speech.py drascula data/drascula_deb/usr/share/scummvm/drascula/en \
      --out data/drascula/audio
  #   -> data/drascula/audio/<speaker>/<line>.flac

  # then label them with Whisper tiny.en (the games' transcripts are not read)
  python tools/pseudo_label.py data/fotaq/audio --out data/fotaq/pseudo.json

Without a path, the game is read where its installed Debian package keeps it. The lines are 11,025 Hz audio,
resampled to the 16 kHz the models read (what lies above 5.5 kHz stays empty). The output folder keeps the
settings it was made with and refuses others. The games' content is not ours: their credits and licences are in
docs/data.md, "Credits and licences of the data".
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from duet.data import drascula_speech, queen_speech
from duet.errors import DuetError
from duet.foundation.errors import cli
from duet.data.game_speech import MAX_JOIN_SECONDS
from duet.foundation.progress import count_printer

#: game -> (its reader, where its Debian package installs the data, the package's name)
GAMES = {
    "queen": (queen_speech.extract, queen_speech.DEBIAN_CONTAINER, "flight-of-the-amazon-queen"),
    "drascula": (drascula_speech.extract, drascula_speech.DEBIAN_FOLDER, "drascula"),
}

_PROGRESS = count_printer(500, "lines")


def get_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("game", choices=sorted(GAMES), help="which game's data: queen (its queen.1c file) or "
                                                            "drascula (its en/ folder of .ALS files)")
    parser.add_argument("source", type=Path, nargs="?",
                        help="the game's data (default: where its Debian package installs it: "
                             + ", ".join(f"{game} {where}" for game, (_, where, _) in sorted(GAMES.items())) + ")")
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
    extract, installed, package = GAMES[args.game]
    source = args.source or installed
    if args.source is None and not installed.exists():
        raise DuetError(f"{installed} not found: install the Debian package {package}, or unpack it and name its "
                        f"data (see --help)")
    report = extract(source, args.out, join_seconds=args.join_seconds, progress=_PROGRESS)
    for problem in report.failed:
        print(f"extract_game_speech: skipped {problem}", file=sys.stderr)
    print(f"extract_game_speech: {report.lines} lines in {report.files} files, {report.speech_seconds / 3600:.2f} h "
          f"of speech -> {args.out} ({len(report.failed)} skipped) in {time.time() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
