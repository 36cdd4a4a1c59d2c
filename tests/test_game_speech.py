"""tools/extract_game_speech.py: the voice lines of two Debian games (MP3 inside Flight of the Amazon Queen's QTBL
container, Drascula's raw 8-bit files) as 16 kHz FLAC files."""

import io
import struct
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from duet.data import drascula_speech as ds
from duet.data import game_speech as gs
from duet.data import queen_speech as qs
from duet.errors import DuetError
from tests.script_helpers import load_script

TOOL = load_script(Path(__file__).resolve().parents[1] / "tools" / "extract_game_speech.py")
RATE = 11025


def _counts(report: gs.ExtractReport) -> tuple[int, int]:
    return report.files, report.lines


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
    report = qs.extract(container, out)
    assert (report.files, report.lines, report.failed) == (3, 3, [])
    written = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.flac"))
    assert written == ["01/010001J1.flac", "01/010001P1.flac", "02/020003P2.flac"]
    info = sf.info(str(out / "01" / "010001J1.flac"))
    assert info.samplerate == 16000 and abs(info.duration - 1.5) < 0.1  # MP3 adds a few ms of padding
    audio, rate = sf.read(str(out / "01" / "010001J1.flac"))
    spectrum = np.abs(np.fft.rfft(audio))
    assert abs(np.argmax(spectrum) * rate / len(audio) - 500) < 10  # the tone survives decoding and resampling
    assert abs(report.speech_seconds - 3.3) < 0.2


def test_lines_of_one_scene_are_joined_up_to_the_length(container, tmp_path):
    out = tmp_path / "joined"
    report = qs.extract(container, out, join_seconds=5)
    written = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.flac"))
    assert written == ["01/010001P1+1.flac", "02/020003P2.flac"]  # scene 02 is never joined to scene 01
    assert (report.files, report.lines) == (2, 3)
    joined = sf.info(str(out / "01" / "010001P1+1.flac")).duration
    assert abs(joined - (1.0 + gs.JOIN_GAP + 1.5)) < 0.15
    out2 = tmp_path / "short"
    assert _counts(qs.extract(container, out2, join_seconds=2)) == (3, 3)  # 1.0 + gap + 1.5 > 2: not joined


def test_an_interrupted_run_keeps_what_is_there(container, tmp_path):
    out = tmp_path / "audio"
    qs.extract(container, out)
    kept = out / "01" / "010001P1.flac"
    kept.write_bytes(b"left as it was")
    assert _counts(qs.extract(container, out)) == (3, 3)
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
    assert TOOL.main(["queen", str(path), "--out", str(tmp_path / "out")]) == 0
    captured = capsys.readouterr()
    assert "skipped 010002P1.SB: " in captured.err  # with libsndfile's reason
    assert "1 lines in 1 files" in captured.out
    assert [p.name for p in (tmp_path / "out").rglob("*.flac")] == ["010001P1.flac"]


def test_tool_refuses_a_join_past_whispers_window(container, tmp_path, capsys):
    assert TOOL.main(["queen", str(container), "--out", str(tmp_path / "out"), "--join-seconds", "31"]) == 2
    assert "--join-seconds must lie in [0, 29]" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    assert TOOL.main(["queen", str(tmp_path / "missing.1c"), "--out", str(tmp_path / "out")]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_entries_past_the_end_or_with_odd_names_are_refused(tmp_path):
    good = _container({"010001P1.SB": _mp3(1.0, 300)})
    past = bytearray(good)
    past[15 + 17:15 + 21] = (len(good) * 2).to_bytes(4, "big")  # the entry's size
    with pytest.raises(DuetError, match="entry 010001P1.SB runs past the end of the file"):
        qs.read_table(bytes(past), "past.1c")
    odd = tmp_path / "odd.1c"
    odd.write_bytes(_container({"../../X.SB": _mp3(0.5, 300)}))
    with pytest.raises(DuetError, match="odd.1c: voice line name '../../X' is not a game file name"):
        qs.extract(odd, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_folder_made_with_other_settings_is_refused(container, tmp_path):
    out = tmp_path / "audio"
    qs.extract(container, out, join_seconds=5)
    with pytest.raises(DuetError, match="holds files made with other settings"):
        qs.extract(container, out)  # a file a line would label the joined lines twice
    assert _counts(qs.extract(container, out, join_seconds=5)) == (2, 3)  # the same settings go on
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    with pytest.raises(DuetError, match="a_file: exists and is not a folder"):
        qs.extract(container, a_file)


def test_progress_reaches_the_last_line_when_it_cannot_be_decoded(tmp_path):
    path = tmp_path / "queen.1c"
    path.write_bytes(_container({"010001P1.SB": _mp3(1.0, 300), "010002P1.SB": b"\0" * 10}))
    seen = []
    report = qs.extract(path, tmp_path / "out", progress=lambda *counts: seen.append(counts))
    assert _counts(report) == (1, 1) and report.failed[0].startswith("010002P1.SB: ")
    assert seen == [(1, 2), (2, 2)]


def test_count_printer_prints_every_n_and_the_last(capsys):
    from duet.foundation.progress import count_printer

    progress = count_printer(2, "files")
    for done in range(1, 6):
        progress(done, 5)
    assert capsys.readouterr().err.splitlines() == ["  2/5 files", "  4/5 files", "  5/5 files"]


@pytest.mark.parametrize("game, package", [("queen", "flight-of-the-amazon-queen"), ("drascula", "drascula")])
def test_tool_without_the_debian_package_says_how_to_get_it(game, package, tmp_path, capsys, monkeypatch):
    reader, _, name = TOOL.GAMES[game]
    monkeypatch.setitem(TOOL.GAMES, game, (reader, tmp_path / "not_installed", name))
    assert TOOL.main([game, "--out", str(tmp_path / "out")]) == 2
    assert f"install the Debian package {package}" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()



def _als(seconds: float, freq: float) -> bytes:
    """Drascula's samples: unsigned 8-bit, 11,025 Hz, no header."""
    t = np.arange(int(seconds * RATE)) / RATE
    return np.round(128 + 60 * np.sin(2 * np.pi * freq * t)).astype(np.uint8).tobytes()


@pytest.fixture()
def drascula_folder(tmp_path):
    folder = tmp_path / "en"
    folder.mkdir()
    (folder / "10.ALS").write_bytes(_als(1.0, 400))
    (folder / "9.ALS").write_bytes(_als(0.5, 300))
    (folder / "D40.ALS").write_bytes(_als(1.2, 600))
    (folder / "VB2.als").write_bytes(_als(0.7, 800))
    (folder / "1.ALG").write_bytes(b"not a voice file")
    (folder / "S3.ALS").write_bytes(_als(0.4, 900))  # the engine's sound effects, not speech
    (folder / "F1.ALS").write_bytes(_als(0.4, 900))
    return folder


def test_drascula_lines_by_speaker_and_number(drascula_folder, tmp_path):
    lines = ds.voice_lines(drascula_folder)
    assert [(line.scene, line.name) for line in lines] == [("hero", "9"), ("hero", "10"), ("D", "D40"), ("VB", "VB2")]
    out = tmp_path / "audio"
    report = ds.extract(drascula_folder, out)
    assert (report.files, report.lines, report.failed) == (4, 4, [])
    written = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.flac"))
    assert written == ["D/D40.flac", "VB/VB2.flac", "hero/10.flac", "hero/9.flac"]
    audio, rate = sf.read(str(out / "D" / "D40.flac"))
    assert rate == 16000 and abs(len(audio) / rate - 1.2) < 0.01
    spectrum = np.abs(np.fft.rfft(audio))
    assert abs(np.argmax(spectrum) * rate / len(audio) - 600) < 10  # unsigned samples read as a centred tone
    assert abs(np.mean(audio)) < 0.01
    assert abs(report.speech_seconds - 3.4) < 0.02


def test_drascula_joins_within_one_speaker(drascula_folder, tmp_path):
    out = tmp_path / "joined"
    report = ds.extract(drascula_folder, out, join_seconds=10)
    written = sorted(p.relative_to(out).as_posix() for p in out.rglob("*.flac"))
    assert written == ["D/D40.flac", "VB/VB2.flac", "hero/9+1.flac"]
    assert _counts(report) == (3, 4)


def test_drascula_bad_folders_and_files_are_named(tmp_path, drascula_folder):
    with pytest.raises(DuetError, match="missing: not a folder"):
        ds.extract(tmp_path / "missing", tmp_path / "out")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DuetError, match="empty: holds no Drascula voice files"):
        ds.extract(empty, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    (drascula_folder / "11.ALS").write_bytes(b"")
    report = ds.extract(drascula_folder, tmp_path / "out")
    assert report.failed == ["11.ALS: no audio in it"] and _counts(report) == (4, 4)


def test_two_games_never_share_a_folder(container, drascula_folder, tmp_path):
    out = tmp_path / "audio"
    qs.extract(container, out)
    with pytest.raises(DuetError, match="holds files made with other settings"):
        ds.extract(drascula_folder, out)


def test_tool_extracts_drascula(drascula_folder, tmp_path, capsys):
    assert TOOL.main(["drascula", str(drascula_folder), "--out", str(tmp_path / "out")]) == 0
    assert "4 lines in 4 files" in capsys.readouterr().out


def test_a_line_whose_name_is_not_a_file_name_is_refused():
    with pytest.raises(DuetError, match="voice line name '../x' is not a game file name"):
        gs.VoiceLine("../x", "hero", "../x.ALS", lambda rate: np.zeros(1))


def test_a_write_that_libsndfile_refuses_is_one_line(drascula_folder, tmp_path, monkeypatch):
    def refuse(*args, **kwargs):
        raise sf.LibsndfileError(1, "System error.")  # what a full disk looks like from libsndfile

    monkeypatch.setattr(gs.sf, "write", refuse)
    with pytest.raises(DuetError, match=r"cannot write .*9\.flac: .*System error"):
        ds.extract(drascula_folder, tmp_path / "out")
    assert not list((tmp_path / "out").rglob("*.flac"))
