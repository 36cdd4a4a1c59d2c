"""A full disk is one line naming the path: duet.foundation.files' atomic writes, every tool's ``cli`` wrapper,
tools/make_manifest.py and the spoken answer (tools/pipeline.py --speak). Each case twice: the write answered
with ENOSPC in process (/dev/full answers every write so), and for real on a tiny tmpfs in a private mount
namespace (skipped where the system allows none)."""

from __future__ import annotations

import builtins
import errno
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import soundfile

import duet.foundation.files as files
from duet.foundation.errors import DiskFullError, cli
from duet.foundation.files import atomic_path, write_text_atomic
from duet.speech_out import SPEAK_ENGINE, speak
from tests.audio_fixtures import write_chapter
from tests.script_helpers import load_script

REPO_ROOT = Path(__file__).parent.parent
make_manifest = load_script(REPO_ROOT / "tools/make_manifest.py")
NO_SPACE = "no space left on device"


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    root = tmp_path / "LibriSpeech"
    write_chapter(root / "train", 11, 100, {1: ("HELLO THERE", 1.0), 2: ("SET A TIMER", 0.75)})
    return root


@pytest.fixture
def full_device_writes(monkeypatch):
    """Every file that duet.foundation.files opens for writing writes to /dev/full (ENOSPC on the flush)."""
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full on this system")
    real_open = builtins.open

    def open_full(path, mode="r", *args, **kwargs):
        return real_open("/dev/full" if "w" in mode else path, mode, *args, **kwargs)
    monkeypatch.setattr(files, "open", open_full, raising=False)


def run_on_full_tmpfs(mount_point: Path, command: list[str]) -> subprocess.CompletedProcess:
    """``command`` run in a private mount namespace where ``mount_point`` is a 64 KiB tmpfs filled to the last
    byte; the test is skipped where the system allows no such namespace (no user namespaces, no mount)."""
    if shutil.which("unshare") is None:
        pytest.skip("no unshare here")
    mount_point.mkdir(exist_ok=True)
    script = (f"mount -t tmpfs -o size=64k tmpfs '{mount_point}' || exit 97; "
              f"cat /dev/zero > '{mount_point}/filler' 2>/dev/null; exec \"$@\"")
    result = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script, "sh", *command],
                            capture_output=True, text=True, cwd=REPO_ROOT, timeout=120)
    if result.returncode == 97 or "unshare failed" in result.stderr or "unshare: " in result.stderr:
        pytest.skip(f"no private tmpfs here: {result.stderr.strip()[:200]}")
    return result


# ------------------------------------------------------------------------------------- the helpers themselves


def test_atomic_write_on_a_full_disk_names_the_output_and_leaves_nothing(tmp_path, full_device_writes):
    target = tmp_path / "out" / "train.json"
    with pytest.raises(DiskFullError) as raised:
        files.write_jsonl_atomic(target, [{"text": "hello"}])
    assert str(raised.value) == f"{target}: {NO_SPACE}"
    assert raised.value.errno == errno.ENOSPC and isinstance(raised.value, OSError)  # still a disk error
    assert list(target.parent.iterdir()) == []


def test_a_full_disk_naming_another_file_keeps_that_name(tmp_path):
    with pytest.raises(OSError) as raised:
        with atomic_path(tmp_path / "out.txt"):
            raise OSError(errno.EDQUOT, os.strerror(errno.EDQUOT), "/data/elsewhere.bin")
    assert not isinstance(raised.value, DiskFullError) and raised.value.filename == "/data/elsewhere.bin"
    with pytest.raises(DiskFullError) as raised:  # the user's quota spent is said as such
        with atomic_path(tmp_path / "out.txt"):
            raise OSError(errno.EDQUOT, os.strerror(errno.EDQUOT))
    assert str(raised.value) == f"{tmp_path / 'out.txt'}: disk quota exceeded"
    assert list(tmp_path.iterdir()) == []


def test_cli_reports_any_full_disk_in_one_line_and_other_os_errors_as_bugs(capsys):
    @cli
    def main(argv):
        raise OSError(argv[0], os.strerror(argv[0]), "/ckpt/last.ckpt")
    assert main([errno.ENOSPC]) == 2
    assert capsys.readouterr().err == f"test_disk_full: error: /ckpt/last.ckpt: {NO_SPACE}\n"
    with pytest.raises(PermissionError):  # not a full disk: a bug or a setup fault, with its traceback
        main([errno.EACCES])


# ---------------------------------------------------------------------------------------- make_manifest.py


def test_make_manifest_on_a_full_disk_is_one_line_naming_the_manifest(corpus, tmp_path, full_device_writes,
                                                                          capsys):
    out = tmp_path / "manifests"
    write_text_atomic(out / "train.json", "the previous manifest\n")  # write_text_atomic is not diverted
    assert make_manifest.main(["--data-root", str(corpus), "--out-dir", str(out), "--jobs", "1", "--force"]) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1] == f"make_manifest: error: {out / 'train.json'}: {NO_SPACE}"
    assert "Traceback" not in err
    assert (out / "train.json").read_text() == "the previous manifest\n"  # untouched, no partial file beside it
    assert sorted(p.name for p in out.iterdir()) == ["train.json", "train.skipped.tsv"]


def test_make_manifest_on_a_real_full_tmpfs(corpus, tmp_path):
    disk = tmp_path / "disk"
    result = run_on_full_tmpfs(disk, [sys.executable, "tools/make_manifest.py", "--data-root", str(corpus),
                                      "--out-dir", str(disk), "--jobs", "1"])
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines()[-1] == f"make_manifest: error: {disk / 'train.json'}: {NO_SPACE}"
    assert "Traceback" not in result.stderr


# ------------------------------------------------------------------------------------------ --speak


def needs_espeak():
    if shutil.which(SPEAK_ENGINE) is None:
        pytest.skip("espeak-ng not installed (bash tools/setup.sh installs it)")


def test_speak_on_a_full_disk_names_the_answer_file(tmp_path, monkeypatch):
    needs_espeak()

    def no_space(self, data):
        with open("/dev/full", "wb") as f:
            f.write(data)
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full on this system")
    monkeypatch.setattr(Path, "write_bytes", no_space)
    out = tmp_path / "answer.wav"
    assert speak("Setting a timer for five minutes.", out) == f"cannot write the spoken answer: {out}: {NO_SPACE}"
    assert list(tmp_path.iterdir()) == []


def test_speak_on_a_real_full_tmpfs(tmp_path):
    """espeak-ng itself ignores a failed write (exit code 0, a WAV cut short whose header it makes agree): the
    answer is written by this process, which sees the error."""
    needs_espeak()
    disk = tmp_path / "disk"
    out = disk / "answer.wav"
    code = ("import sys; from pathlib import Path; from duet.speech_out import speak; "
            "print(speak('Setting a timer for five minutes.', Path(sys.argv[1])))")
    result = run_on_full_tmpfs(disk, [sys.executable, "-c", code, str(out)])
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"cannot write the spoken answer: {out}: {NO_SPACE}"


def test_speak_writes_espeaks_samples_under_a_header_with_their_sizes(tmp_path):
    needs_espeak()
    out = tmp_path / "answer.wav"
    assert speak("Setting a timer for five minutes.", out) is None
    direct = tmp_path / "direct.wav"  # espeak-ng writing the file itself fills the sizes in when it closes it
    subprocess.run([SPEAK_ENGINE, "-v", "en-us", "-w", str(direct), "--", "Setting a timer for five minutes."],
                   check=True)
    assert out.read_bytes() == direct.read_bytes() and soundfile.info(out).duration > 1.0
