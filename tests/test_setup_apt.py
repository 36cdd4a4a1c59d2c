"""The setup's apt step (tools/setup_apt.sh, sourced by tools/setup.sh) against a fake apt-get.

The fake behaves as apt does where it matters: a package it cannot locate makes it refuse the whole install
("E: Unable to locate package X", exit 100, nothing installed); contrib packages are found only through a
source list that names contrib; while "another process" holds the lock every call fails at once with apt's
lock message. It records what it installed, so the tests see what a real machine would end up with.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
SETUP_APT = REPO_ROOT / "tools" / "setup_apt.sh"
BASH = shutil.which("bash")

FAKE_APT_GET = r"""#!/bin/bash
# the packages only Debian's contrib/non-free components hold
contrib=" festvox-rablpc16k festvox-don mbrola mbrola-us1 mbrola-us2 mbrola-us3 mbrola-en1 rhvoice rhvoice-english libttspico-utils "
echo "$*" >> "$FAKE_APT_DIR/calls"
verb="" packages="" private=0 sources_contrib=0
for arg in "$@"; do
  case "$arg" in
    -oDir::Etc::SourceList=*) private=1; grep -q contrib "${arg#-oDir::Etc::SourceList=}" && sources_contrib=1 ;;
    -*) ;;
    *) if [ -z "$verb" ]; then verb=$arg; else packages="$packages $arg"; fi ;;
  esac
done
if [ -f "$FAKE_APT_DIR/locked_until" ] && [ "$(date +%s)" -lt "$(cat "$FAKE_APT_DIR/locked_until")" ]; then
  if [ "$verb" = update ]; then
    echo "E: Could not get lock /var/lib/apt/lists/lock. It is held by process 4242 (apt-get)"
  else
    echo "E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 4242 (apt-get)"
    echo "E: Unable to acquire the dpkg frontend lock (/var/lib/dpkg/lock-frontend), is another process using it?"
  fi
  exit 100
fi
# no_contrib: the mirror named by a private source list cannot be reached
if [ "$private" = 1 ] && [ -f "$FAKE_APT_DIR/no_contrib" ]; then
  sources_contrib=0
  if [ "$verb" = update ]; then
    echo "E: Some index files failed to download. They have been ignored, or old ones used instead."; exit 100
  fi
fi
[ "$verb" = update ] && exit 0
refused=0
for p in $packages; do
  if [ -f "$FAKE_APT_DIR/broken" ] && grep -qx "$p" "$FAKE_APT_DIR/broken"; then
    echo "E: Package '$p' has no installation candidate"; refused=1
  elif [ "$sources_contrib" = 0 ] && [[ "$contrib" == *" $p "* ]]; then
    echo "E: Unable to locate package $p"; refused=1
  fi
done
[ "$refused" = 1 ] && exit 100
for p in $packages; do echo "$p" >> "$FAKE_APT_DIR/installed"; done
"""

# what the apt step and the fake call; nothing else is on PATH, so sox, espeak-ng, ... count as missing
TOOLS = ("env", "grep", "head", "tail", "tr", "sleep", "mktemp", "mkdir", "rm", "cat", "date", "id")


@pytest.fixture
def fake_apt(tmp_path) -> dict:
    if BASH is None:
        pytest.skip("bash not found")
    state = tmp_path / "apt"
    state.mkdir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in TOOLS:
        found = shutil.which(tool)
        if found is None:
            pytest.skip(f"{tool} not found")
        (bin_dir / tool).symlink_to(found)
    apt_get = bin_dir / "apt-get"
    apt_get.write_text(FAKE_APT_GET)
    apt_get.chmod(0o755)
    os_release = tmp_path / "os-release"
    os_release.write_text('ID=debian\nVERSION_CODENAME=bookworm\n')
    env = {"PATH": str(bin_dir), "FAKE_APT_DIR": str(state), "APT_SUDO": "", "OS_RELEASE": str(os_release),
           "APT_LOCK_POLL": "0.2", "HOME": str(tmp_path), "TMPDIR": str(tmp_path)}
    return {"state": state, "env": env, "bin": bin_dir}


def run_steps(fake_apt: dict, *steps: str, timeout: float = 60, **env) -> subprocess.CompletedProcess:
    """Source the apt step as tools/setup.sh does (set -euo pipefail) and run ``steps``."""
    script = f"set -euo pipefail; . {SETUP_APT}; " + "; ".join(steps)
    return subprocess.run([BASH, "-c", script], capture_output=True, text=True, timeout=timeout,
                          env={**fake_apt["env"], **env})


def installed(fake_apt: dict) -> list[str]:
    path = fake_apt["state"] / "installed"
    return path.read_text().split() if path.exists() else []


def package_list(name: str) -> list[str]:
    out = subprocess.run([BASH, "-c", f". {SETUP_APT}; echo ${name}"], capture_output=True, text=True,
                         env={"PATH": os.environ["PATH"], "APT_SUDO": ""}, check=True).stdout
    return out.split()


def test_main_packages_install_although_apt_cannot_locate_the_contrib_ones(fake_apt):
    """A machine whose sources hold Debian main only: the main list installs, and the contrib/non-free voices
    come through the private source list."""
    proc = run_steps(fake_apt, "install_system_packages", "install_extra_voices")
    assert proc.returncode == 0, proc.stderr
    main = package_list("SYSTEM_PACKAGES")
    assert {"sox", "espeak-ng", "festival", "wordnet-base", "ffmpeg", "curl"} <= set(main)
    got = installed(fake_apt)
    assert set(main) <= set(got), proc.stdout + proc.stderr
    assert {"festvox-rablpc16k", "festvox-don", "mbrola-us1"} <= set(got)
    assert "could not install" not in proc.stderr and "root" not in proc.stderr


def test_contrib_voices_that_cannot_be_found_leave_the_main_packages_and_the_setup_going(fake_apt):
    """Without contrib anywhere (the private list's mirror is out of reach too) the voices are a note naming
    apt's own error, and the setup goes on."""
    (fake_apt["state"] / "no_contrib").touch()
    proc = run_steps(fake_apt, "install_system_packages", "install_extra_voices", "echo carried on")
    assert proc.returncode == 0 and "carried on" in proc.stdout
    assert set(package_list("SYSTEM_PACKAGES")) <= set(installed(fake_apt))
    assert not set(package_list("EXTRA_VOICE_PACKAGES")) & set(installed(fake_apt))
    notes = [line for line in proc.stderr.splitlines() if line.startswith("setup: note:")]
    assert notes[0] == ("setup: note: apt-get update failed (E: Some index files failed to download. They have been "
                        "ignored, or old ones used instead.); installing from the package lists there are")
    assert notes[1].startswith("setup: note: could not install the contrib/non-free TTS voices: "
                               "E: Unable to locate package festvox-rablpc16k E: Unable to locate package festvox-don")
    assert len(notes) == 3 and "corpora skip the speakers" in notes[2]


def test_a_failed_install_shows_apts_error_and_no_root_note(fake_apt):
    (fake_apt["state"] / "broken").write_text("ffmpeg\n")
    proc = run_steps(fake_apt, "install_system_packages")
    assert proc.returncode == 0
    assert "setup: note: could not install the system packages: E: Package 'ffmpeg' has no installation " \
           "candidate" in proc.stderr
    assert "root" not in proc.stderr and "sudo" not in proc.stderr
    assert "still missing:" in proc.stderr  # and which tools go without


def test_without_root_or_sudo_the_note_says_so(fake_apt):
    sudo = fake_apt["bin"] / "sudo"
    sudo.write_text("#!/bin/bash\necho 'sudo: a password is required' >&2\nexit 1\n")
    sudo.chmod(0o755)
    proc = run_steps(fake_apt, "install_system_packages", APT_SUDO=f"{sudo} -n")
    assert proc.returncode == 0 and installed(fake_apt) == []
    assert "apt-get needs root, and sudo -n (passwordless sudo) is not available" in proc.stderr
    assert not (fake_apt["state"] / "calls").exists()  # apt-get was not even tried


def test_a_held_lock_is_waited_for_and_said_on_the_console(fake_apt):
    (fake_apt["state"] / "locked_until").write_text(str(int(time.time()) + 3))
    started = time.monotonic()
    proc = run_steps(fake_apt, "install_system_packages", APT_LOCK_WAIT="60")
    assert proc.returncode == 0, proc.stderr
    assert time.monotonic() - started >= 1.5  # it did wait for the other process
    waiting = [line for line in proc.stdout.splitlines() if "holds apt's lock" in line]
    assert len(waiting) == 1, proc.stdout  # said once, not once per try
    assert "E: Could not get lock /var/lib/apt/lists/lock. It is held by process 4242" in waiting[0]
    assert "waiting up to 60 s" in waiting[0]
    assert set(package_list("SYSTEM_PACKAGES")) <= set(installed(fake_apt))
    assert "could not install" not in proc.stderr


def test_a_lock_that_stays_held_ends_in_a_note_naming_it_within_the_bound(fake_apt):
    (fake_apt["state"] / "locked_until").write_text(str(int(time.time()) + 3600))
    started = time.monotonic()
    proc = run_steps(fake_apt, "install_system_packages", "echo carried on", APT_LOCK_WAIT="2")
    assert proc.returncode == 0 and "carried on" in proc.stdout
    assert time.monotonic() - started < 20
    assert installed(fake_apt) == []
    note = [line for line in proc.stderr.splitlines() if "could not install the system packages" in line]
    assert len(note) == 1, proc.stderr
    assert "another apt/dpkg process still holds apt's lock after 2 s" in note[0]
    assert "/var/lib/dpkg/lock-frontend" in note[0] and "run bash tools/setup.sh again" in note[0]
    assert "root" not in proc.stderr


def test_kenlm_build_dependencies_go_through_the_same_step(fake_apt):
    dpkg = fake_apt["bin"] / "dpkg"
    dpkg.write_text("#!/bin/bash\nexit 1\n")  # dpkg -s: nothing is installed
    dpkg.chmod(0o755)
    proc = run_steps(fake_apt, "install_kenlm_debs")
    assert proc.returncode == 0, proc.stderr
    assert set(package_list("KENLM_DEBS")) <= set(installed(fake_apt))

    (fake_apt["state"] / "locked_until").write_text(str(int(time.time()) + 3600))
    (fake_apt["state"] / "installed").unlink()
    proc = run_steps(fake_apt, "install_kenlm_debs || echo skipped the build", APT_LOCK_WAIT="1")
    assert "skipped the build" in proc.stdout
    assert "still holds apt's lock" in proc.stderr
    assert "n-gram LMs (tools/train_ngram_lm.py) are unavailable" in proc.stderr


FAKE_PYTHON_WITHOUT_ENSUREPIP = """#!/bin/bash
# a stock Debian 12 python3: no ensurepip until python3.11-venv is installed
case "$2" in
  *ensurepip*) grep -qx python3.11-venv "$FAKE_APT_DIR/installed" 2>/dev/null && exit 0
               echo "ModuleNotFoundError: No module named 'ensurepip'" >&2; exit 1 ;;
  *version_info*) echo 3.11 ;;
esac
"""


def test_pythons_venv_module_is_installed_where_the_interpreter_lacks_it(fake_apt):
    python = fake_apt["bin"] / "python3"
    python.write_text(FAKE_PYTHON_WITHOUT_ENSUREPIP)
    python.chmod(0o755)
    proc = run_steps(fake_apt, "install_venv_module", PYTHON=str(python))
    assert proc.returncode == 0, proc.stderr
    assert installed(fake_apt) == ["python3.11-venv"]
    assert "setup: installing Python's venv module (python3.11-venv)" in proc.stdout

    calls = (fake_apt["state"] / "calls").read_text()
    proc = run_steps(fake_apt, "install_venv_module", PYTHON=str(python))  # now it has it: apt is not called
    assert proc.returncode == 0 and (fake_apt["state"] / "calls").read_text() == calls
