"""tools/extract_queen_speech.py: the game's voice lines (MP3 inside a QTBL container) as 16 kHz FLAC files."""

import io
import struct
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from duet import queen_speech as qs
from duet.errors import DuetError
from tests.script_helpers import load_script

TOOL = load_script(Path(__file__).resolve().parents[1] / "tools" / "extract_queen_speech.py")
RATE = 11025


def _mp3(seconds: float, freq: float) -> bytes:
    t = np.arange(int(seconds * RATE)) / RATE
    buffer = io.BytesIO()
    sf.write(buffer, (0.3 * np.sin(2 * np.pi * freq * t)).astype(np.float32), RATE, format="MP3")
    return buffer.getvalue()


def _container(entries: dict[str, bytes]) -> bytes:
    """A QTBL file: magic, version, 3 bytes, count at byte 13, 21-byte entries, then the entries' bytes."""
    head = b"QTBL" + b"CEM10\0" + b"\0\0\1" + struct.pack(">H", len(entries))
    offset = len(head) + 21 * len(entries)
    table, body = b"", b""
    for name, data in entries.items():
        table += struct.pack(">12sBII", name.encode(), 1, offset + len(body), len(data))
        body += data
    return head + table + body


@pytest.fixture()
def container(tmp_path):
    path = tmp_path / "queen.1c"
    path.write_bytes(_container({"010001P1.SB": _mp3(1.0, 300), "ROOM.PCX": b"not audio",
                                 "010001J1.SB": _mp3(1.5, 500), "020003P2.SB": _mp3(0.8, 700)}))
    return path


def test_table_and_voice_lines(container):
    entries = qs.read_table(container.read_bytes())
    assert [e.name for e in entries] == ["010001P1.SB", "ROOM.PCX", "010001J1.SB", "020003P2.SB"]
    assert [e.name for e in qs.voice_lines(entries)] == ["010001P1.SB", "010001J1.SB", "020003P2.SB"]


def test_a_file_a_line_at_16_khz(container, tmp_path):
    out = tmp_path / "audio"
    files, lines, seconds, failed = qs.extract(container, out)
    assert (files, lines, failed) == (3, 3, [])
    written = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.flac"))
    assert written == ["01/010001J1.flac", "01/010001P1.flac", "02/020003P2.flac"]
    info = sf.info(str(out / "01" / "010001J1.flac"))
    assert info.samplerate == 16000 and abs(info.duration - 1.5) < 0.1  # MP3 adds a few ms of padding
    audio, rate = sf.read(str(out / "01" / "010001J1.flac"))
    spectrum = np.abs(np.fft.rfft(audio))
    assert abs(np.argmax(spectrum) * rate / len(audio) - 500) < 10  # the tone survives decoding and resampling
    assert abs(seconds - 3.3) < 0.2


def test_lines_of_one_scene_are_joined_up_to_the_length(container, tmp_path):
    out = tmp_path / "joined"
    files, lines, seconds, failed = qs.extract(container, out, join_seconds=5)
    written = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.flac"))
    assert written == ["01/010001P1+1.flac", "02/020003P2.flac"]  # scene 02 is never joined to scene 01
    assert (files, lines) == (2, 3)
    joined = sf.info(str(out / "01" / "010001P1+1.flac")).duration
    assert abs(joined - (1.0 + qs.JOIN_GAP + 1.5)) < 0.15
    out2 = tmp_path / "short"
    assert qs.extract(container, out2, join_seconds=2)[:2] == (3, 3)  # 1.0 + gap + 1.5 > 2: not joined


def test_an_interrupted_run_keeps_what_is_there(container, tmp_path):
    out = tmp_path / "audio"
    qs.extract(container, out)
    kept = out / "01" / "010001P1.flac"
    kept.write_bytes(b"left as it was")
    assert qs.extract(container, out)[:2] == (3, 3)
    assert kept.read_bytes() == b"left as it was"


def test_bad_containers_are_named(tmp_path):
    not_queen = tmp_path / "other.bin"
    not_queen.write_bytes(b"RIFF....")
    with pytest.raises(DuetError, match="other.bin: not a Flight of the Amazon Queen data file"):
        qs.extract(not_queen, tmp_path / "out")
    short = tmp_path / "short.1c"
    short.write_bytes(_container({"010001P1.SB": _mp3(1.0, 300)})[:30])
    with pytest.raises(DuetError, match="cut short"):
        qs.extract(short, tmp_path / "out")
    silent = tmp_path / "silent.1c"
    silent.write_bytes(_container({"ROOM.PCX": b"x"}))
    with pytest.raises(DuetError, match="no voice lines"):
        qs.extract(silent, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_an_undecodable_line_is_skipped_and_named(tmp_path, capsys):
    path = tmp_path / "queen.1c"
    path.write_bytes(_container({"010001P1.SB": _mp3(1.0, 300), "010002P1.SB": b"\0" * 10}))
    assert TOOL.main([str(path), "--out", str(tmp_path / "out")]) == 0
    captured = capsys.readouterr()
    assert "skipped 010002P1.SB: " in captured.err  # with libsndfile's reason
    assert "1 lines in 1 files" in captured.out
    assert [p.name for p in (tmp_path / "out").rglob("*.flac")] == ["010001P1.flac"]


def test_tool_refuses_a_join_past_whispers_window(container, tmp_path, capsys):
    assert TOOL.main([str(container), "--out", str(tmp_path / "out"), "--join-seconds", "31"]) == 2
    assert "--join-seconds must lie in [0, 29]" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    assert TOOL.main([str(tmp_path / "missing.1c"), "--out", str(tmp_path / "out")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_entries_past_the_end_or_with_odd_names_are_refused(tmp_path):
    good = _container({"010001P1.SB": _mp3(1.0, 300)})
    past = bytearray(good)
    past[15 + 17:15 + 21] = (len(good) * 2).to_bytes(4, "big")  # the entry's size
    with pytest.raises(DuetError, match="entry 010001P1.SB runs past the end of the file"):
        qs.read_table(bytes(past), "past.1c")
    with pytest.raises(DuetError, match="'../../X.SB' is not a game file name"):
        qs.read_table(_container({"../../X.SB": _mp3(0.5, 300)}), "odd.1c")


def test_a_folder_made_with_other_settings_is_refused(container, tmp_path):
    out = tmp_path / "audio"
    qs.extract(container, out, join_seconds=5)
    with pytest.raises(DuetError, match="holds files made with other settings"):
        qs.extract(container, out)  # a file a line would label the joined lines twice
    assert qs.extract(container, out, join_seconds=5)[:2] == (2, 3)  # the same settings go on
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    with pytest.raises(DuetError, match="a_file: exists and is not a folder"):
        qs.extract(container, a_file)


def test_progress_reaches_the_last_line_when_it_cannot_be_decoded(tmp_path):
    path = tmp_path / "queen.1c"
    path.write_bytes(_container({"010001P1.SB": _mp3(1.0, 300), "010002P1.SB": b"\0" * 10}))
    seen = []
    files, lines, _, failed = qs.extract(path, tmp_path / "out", progress=lambda *counts: seen.append(counts))
    assert (files, lines) == (1, 1) and failed[0].startswith("010002P1.SB: ")
    assert seen == [(1, 2), (2, 2)]


def test_count_printer_prints_every_n_and_the_last(capsys):
    from duet.stage_progress import count_printer

    progress = count_printer(2, "files")
    for done in range(1, 6):
        progress(done, 5)
    assert capsys.readouterr().err.splitlines() == ["  2/5 files", "  4/5 files", "  5/5 files"]


def test_tool_without_the_debian_package_says_how_to_get_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(TOOL, "DEBIAN_CONTAINER", tmp_path / "not_installed" / "queen.1c")
    assert TOOL.main(["--out", str(tmp_path / "out")]) == 2
    assert "install the Debian package flight-of-the-amazon-queen" in capsys.readouterr().err
