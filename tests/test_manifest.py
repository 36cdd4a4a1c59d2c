"""tools/make_manifest.py and duet.data.manifest: pairing, header probing, bad input, atomicity, re-runs."""

from __future__ import annotations

import io
import json
import subprocess
import urllib.error
from pathlib import Path

import pytest
import soundfile

import duet.data.librispeech as librispeech
from duet.errors import AsrInputError
from duet.data.manifest import (ManifestOptions, build_split_manifest, find_splits, read_manifest, spread_subset,
                           write_manifest)
from duet.foundation.files import atomic_path, read_jsonl
from tests.audio_fixtures import write_chapter, write_tone
from tests.script_helpers import load_script

make_manifest = load_script(Path(__file__).parent.parent / "tools/make_manifest.py")


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    """LibriSpeech/{train,test} with three good utterances in train and one in test."""
    root = tmp_path / "LibriSpeech"
    write_chapter(root / "train", 11, 100, {1: ("HELLO THERE", 1.0), 2: ("IT'S  A  TEST", 1.5)})
    write_chapter(root / "train", 12, 200, {1: ("SET A TIMER", 0.75)})
    write_chapter(root / "test", 13, 300, {1: ("WHAT TIME IS IT", 1.25)})
    return root


def problems_by_id(manifest) -> dict[str, str]:
    return {p.item: p.reason for p in manifest.problems}


def test_good_split_gives_absolute_paths_lowercase_text_and_header_durations(corpus):
    manifest = build_split_manifest(corpus / "train")
    assert manifest.problems == []
    assert [Path(e["audio_filepath"]).name for e in manifest.entries] == [
        "11-100-0001.flac", "11-100-0002.flac", "12-200-0001.flac"]
    assert [e["text"] for e in manifest.entries] == ["hello there", "it's a test", "set a timer"]
    assert [e["duration"] for e in manifest.entries] == [1.0, 1.5, 0.75]
    assert all(Path(e["audio_filepath"]).is_absolute() for e in manifest.entries)
    assert set(manifest.entries[0]) == {"audio_filepath", "duration", "text"}


def test_find_splits_accepts_a_corpus_root_or_a_single_split(corpus, tmp_path):
    assert [d.name for d in find_splits(corpus)] == ["test", "train"]
    assert find_splits(corpus / "train") == [corpus / "train"]
    flat = tmp_path / "flat"
    write_chapter(flat, 1, 1, {1: ("A", 0.5)})
    (flat / "1" / "1").rename(flat / "recordings")
    assert find_splits(flat) == [flat]


def test_every_kind_of_bad_input_is_reported_by_id(tmp_path):
    split = tmp_path / "split"
    chapter = write_chapter(split, 1, 1, {
        1: ("GOOD ONE", 1.0),
        2: ("NO AUDIO FOR THIS", 1.0),
        3: ("CORRUPT", 1.0),
        4: ("EMPTY FILE", 1.0),
        5: ("EIGHT KILOHERTZ", 1.0),
        6: ("STEREO", 1.0),
        7: ("TOO SHORT", 0.05),
        8: ("TOO LONG", 3.0),
    })
    (chapter / "1-1-0002.flac").unlink()
    (chapter / "1-1-0003.flac").write_bytes(b"fLaC but then garbage" * 10)
    (chapter / "1-1-0004.flac").write_bytes(b"")
    write_tone(chapter / "1-1-0005.flac", 1.0, sample_rate=8000)
    write_tone(chapter / "1-1-0006.flac", 1.0, channels=2)
    write_tone(chapter / "1-1-0009.flac", 1.0)  # audio without a transcript line
    # a second transcript file: an empty transcript, non-UTF-8 bytes, and a duplicate id
    other = split / "2" / "2"
    write_tone(other / "2-2-0001.flac", 1.0)
    write_tone(other / "2-2-0002.flac", 1.0)
    write_tone(other / "1-1-0001.wav", 1.0, fmt="WAV")  # same id as a FLAC elsewhere
    (other / "2-2.trans.txt").write_bytes(b"2-2-0001 \n2-2-0002 CAF\xe9 LATTE\n1-1-0001 GOOD ONE AGAIN\n")

    manifest = build_split_manifest(split, ManifestOptions(min_duration=0.1, max_duration=2.0))
    reasons = problems_by_id(manifest)
    assert manifest.entries == []  # 1-1-0001 is a duplicate both as transcript and as audio
    assert "no audio file" in reasons["1-1-0002"]
    assert "unreadable audio" in reasons["1-1-0003"]
    assert "empty audio file" in reasons["1-1-0004"]
    assert "sample rate 8000 Hz" in reasons["1-1-0005"]
    assert "2 channels" in reasons["1-1-0006"]
    assert "duration 0.050 s outside" in reasons["1-1-0007"]
    assert "duration 3.000 s outside" in reasons["1-1-0008"]
    assert "no transcript line" in reasons["1-1-0009"]
    assert "empty transcript" in reasons["2-2-0001"]
    assert "not valid UTF-8" in reasons["2-2-0002"]
    assert "duplicate" in reasons["1-1-0001"]
    # ids with a bad transcript line are not reported a second time as "audio without transcript"
    assert sum(p.item == "2-2-0001" for p in manifest.problems) == 1


def test_truncated_flac_is_caught_only_with_verify_audio(tmp_path):
    split = tmp_path / "split"
    chapter = write_chapter(split, 1, 1, {1: ("CUT OFF", 2.0)})
    flac = chapter / "1-1-0001.flac"
    flac.write_bytes(flac.read_bytes()[: flac.stat().st_size // 2])
    assert build_split_manifest(split).problems == []  # the header alone still looks fine
    reasons = problems_by_id(build_split_manifest(split, ManifestOptions(verify_audio=True)))
    assert "1-1-0001" in reasons and ("truncated" in reasons["1-1-0001"] or "corrupt" in reasons["1-1-0001"])


def test_parallel_probing_matches_serial(tmp_path):
    split = tmp_path / "split"
    write_chapter(split, 5, 5, {i: (f"UTTERANCE {i}", 0.2 + 0.001 * i) for i in range(300)})
    serial = build_split_manifest(split, jobs=1)
    parallel = build_split_manifest(split, jobs=2)
    assert parallel.entries == serial.entries and len(serial.entries) == 300


def test_cli_writes_manifests_and_problem_lists_then_skips_unchanged_reruns(corpus, tmp_path, capsys):
    out = tmp_path / "manifests"
    (corpus / "train" / "12" / "200" / "12-200-0001.flac").unlink()
    assert make_manifest.main(["--data-root", str(corpus), "--out-dir", str(out), "--jobs", "1"]) == 0
    assert len(read_jsonl(out / "train.json")) == 2 and len(read_jsonl(out / "test.json")) == 1
    assert "12-200-0001\ttranscript line has no audio file" in (out / "train.skipped.tsv").read_text()
    assert "12-200-0001: transcript line has no audio file" in capsys.readouterr().err

    assert make_manifest.main(["--data-root", str(corpus), "--out-dir", str(out)]) == 0
    assert capsys.readouterr().out.count("is up to date (same files and options), skipped") == 2

    write_tone(corpus / "train" / "12" / "200" / "12-200-0001.flac", 0.75)  # a changed input rebuilds
    assert make_manifest.main(["--data-root", str(corpus), "--out-dir", str(out), "--splits", "train"]) == 0
    assert "is up to date" not in capsys.readouterr().out
    assert len(read_jsonl(out / "train.json")) == 3

    assert make_manifest.main(["--data-root", str(corpus), "--out-dir", str(out), "--splits", "train",
                               "--max-duration", "1.2"]) == 0  # changed options rebuild too
    assert len(read_jsonl(out / "train.json")) == 2


def test_max_utterances_keeps_an_even_spread_and_is_part_of_the_rerun_check(corpus, tmp_path, capsys):
    entries = [{"audio_filepath": f"/a/{i}.flac"} for i in range(10)]
    assert [e["audio_filepath"] for e in spread_subset(entries, 3)] == ["/a/0.flac", "/a/3.flac", "/a/6.flac"]
    assert spread_subset(entries, 50) == entries
    out = tmp_path / "manifests"
    args = ["--data-root", str(corpus), "--out-dir", str(out), "--splits", "train", "--jobs", "1"]
    assert make_manifest.main(args + ["--max-utterances", "2"]) == 0
    assert len(read_jsonl(out / "train.json")) == 2
    assert make_manifest.main(args) == 0  # without the cap the manifest is rebuilt whole, not reused
    assert len(read_jsonl(out / "train.json")) == 3
    with pytest.raises(SystemExit):
        make_manifest.main(args + ["--max-utterances", "0"])
    assert "--max-utterances must be at least 1" in capsys.readouterr().err


def test_strict_fails_without_writing_a_manifest(corpus, tmp_path, capsys):
    (corpus / "train" / "11" / "100" / "11-100-0002.flac").write_bytes(b"")
    out = tmp_path / "manifests"
    assert make_manifest.main(["--data-root", str(corpus), "--out-dir", str(out), "--splits", "train",
                               "--strict"]) == 1
    assert "11-100-0002: empty audio file" in capsys.readouterr().err
    assert not (out / "train.json").exists()


def test_unknown_split_and_missing_root_are_one_line_errors(corpus, tmp_path, capsys):
    assert make_manifest.main(["--data-root", str(corpus), "--splits", "dev", "--out-dir", str(tmp_path)]) == 2
    assert "no split dev" in capsys.readouterr().err
    assert make_manifest.main(["--data-root", str(tmp_path / "nope")]) == 2
    assert "is not a folder" in capsys.readouterr().err


def test_atomic_path_leaves_old_output_untouched_when_writing_fails(tmp_path):
    target = tmp_path / "train.json"
    target.write_text("old\n")
    with pytest.raises(KeyboardInterrupt):
        with atomic_path(target) as tmp, open(tmp, "w") as f:
            f.write("half of the new ")
            raise KeyboardInterrupt
    assert target.read_text() == "old\n"
    assert list(tmp_path.iterdir()) == [target]


def test_download_offline_is_one_clear_line(tmp_path, monkeypatch, capsys):
    def unreachable(*_args, **_kwargs):
        raise urllib.error.URLError("Temporary failure in name resolution")
    monkeypatch.setattr(librispeech.urllib.request, "urlopen", unreachable)
    assert make_manifest.main(["--download", "dev-clean", "--download-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot download" in err[0] and "--data-root" in err[0]
    assert list(tmp_path.iterdir()) == []


def test_download_rejects_a_checksum_mismatch(tmp_path, monkeypatch):
    class FakeResponse(io.BytesIO):
        headers = {"Content-Length": "4"}
    monkeypatch.setattr(librispeech.urllib.request, "urlopen", lambda *a, **k: FakeResponse(b"nope"))
    with pytest.raises(librispeech.DownloadError, match="does not match"):
        librispeech.fetch_archive("dev-clean", tmp_path)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.integration
def test_bundled_sample_manifests(repo_root, python, tmp_path):
    corpus = repo_root / "samples" / "LibriSpeech"
    if not corpus.is_dir():
        pytest.skip("samples/LibriSpeech not generated yet")
    result = subprocess.run([python, "tools/make_manifest.py", "--out-dir", str(tmp_path)], cwd=repo_root,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1].startswith("done: 3 split(s)")
    for split in ("train-clean", "dev-clean", "test-clean"):
        entries = read_jsonl(tmp_path / f"{split}.json")
        flacs = sorted((corpus / split).rglob("*.flac"))
        assert len(entries) == len(flacs) > 0
        for entry in entries:
            info = soundfile.info(entry["audio_filepath"])
            assert abs(entry["duration"] - info.frames / info.samplerate) <= 0.001
            assert Path(entry["audio_filepath"]).is_absolute()
            assert entry["text"] == entry["text"].lower() and entry["text"].strip()
    assert len(read_jsonl(tmp_path / "train-clean.json")) >= 500
    line = (tmp_path / "test-clean.json").read_text().splitlines()[0]
    assert json.loads(line)["audio_filepath"].startswith(str(corpus.resolve()))


def test_read_manifest_names_the_file_and_line_of_a_bad_line(tmp_path):
    manifest = tmp_path / "m.json"
    good = json.dumps({"audio_filepath": "a.flac", "duration": 1.0, "text": "hi"})
    manifest.write_text(f"{good}\n\n{good[:-1]}\n")  # line 2 blank, line 3 cut short
    with pytest.raises(AsrInputError, match=rf"^{manifest}:3: not valid JSON"):
        read_manifest(manifest)
    manifest.write_text(f"{good}\n" + json.dumps({"audio_filepath": "b.flac", "text": "x"}) + "\n")
    with pytest.raises(AsrInputError, match=rf"^{manifest}:2: lacks duration$"):
        read_manifest(manifest)
    manifest.write_text(f"{good}\n[1, 2]\n")
    with pytest.raises(AsrInputError, match=rf"^{manifest}:2: not a JSON object"):
        read_manifest(manifest)


def test_manifest_round_trip_resolves_relative_audio_against_its_folder(tmp_path):
    entries = [{"audio_filepath": "sub/a.flac", "duration": 1.25, "text": "it's a test"}]
    assert write_manifest(tmp_path / "m.json", entries) == 1
    assert read_manifest(tmp_path / "m.json") == [{**entries[0], "audio_filepath": str(tmp_path / "sub/a.flac")}]
    with pytest.raises(AsrInputError, match="entry 1 to write lacks text"):
        write_manifest(tmp_path / "n.json", [{"audio_filepath": "a.flac", "duration": 1.0}])
    assert not (tmp_path / "n.json").exists()
