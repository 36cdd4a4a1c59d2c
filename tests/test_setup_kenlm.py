"""The setup's KenLM step (tools/setup_kenlm.sh, sourced by tools/setup.sh): compiled once, then copied from the
user's cache by the next setup on the same machine (a new clone, a rebuilt .venv).

pip and cmake are fakes: pip "downloads" an empty sdist and cmake "builds" two shell scripts, recording each call,
so the tests see whether a compile ran without compiling anything.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
BASH = shutil.which("bash")

FAKE_PYTHON = r"""#!/bin/bash
# only "python -m pip download ... -d DIR" is called: an sdist holding an empty source folder
echo "pip $*" >> "$FAKE_LOG"
[ -f "$FAKE_DIR/pip_fails" ] && { echo "ERROR: No matching distribution found for kenlm" >&2; exit 1; }
dest="${@: -1}"
mkdir -p "$dest/kenlm-0.3.0" && tar -czf "$dest/kenlm-0.3.0.tar.gz" -C "$dest" kenlm-0.3.0
"""

FAKE_CMAKE = r"""#!/bin/bash
echo "cmake $*" >> "$FAKE_LOG"
if [ "$1" = --build ]; then
  mkdir -p "$2/bin"
  for tool in lmplz build_binary; do printf '#!/bin/bash\necho usage >&2; exit 1\n' > "$2/bin/$tool"; done
  chmod +x "$2/bin/lmplz" "$2/bin/build_binary"
fi
"""


@pytest.fixture
def setup_env(tmp_path):
    if BASH is None:
        pytest.skip("bash is not installed")
    venv, fakes = tmp_path / "venv", tmp_path / "fakes"
    (venv / "bin").mkdir(parents=True)
    fakes.mkdir()
    for path, text in ((venv / "bin" / "python", FAKE_PYTHON), (fakes / "cmake", FAKE_CMAKE)):
        path.write_text(text)
        path.chmod(0o755)
    os_release = tmp_path / "os-release"
    os_release.write_text("ID=debian\nVERSION_ID=12\n")
    env = {**os.environ, "PATH": f"{fakes}:{os.environ['PATH']}", "VENV": str(venv), "DUET_SKIP_APT": "1",
           "XDG_CACHE_HOME": str(tmp_path / "cache"), "OS_RELEASE": str(os_release),
           "FAKE_LOG": str(tmp_path / "calls"), "FAKE_DIR": str(tmp_path), "TMPDIR": str(tmp_path)}
    return env, venv, tmp_path


def build_kenlm_tools(env, *, apt_fails: bool = False) -> subprocess.CompletedProcess:
    """Source the step as tools/setup.sh does (set -euo pipefail) and run it; with ``apt_fails`` the build
    dependencies cannot be installed (no root, apt locked)."""
    no_apt = "install_kenlm_debs() { echo 'apt was needed' >&2; return 1; }; " if apt_fails else ""
    script = (f"set -euo pipefail; . tools/setup_apt.sh; {no_apt}. tools/setup_kenlm.sh; build_kenlm_tools; "
              "echo cache=$KENLM_CACHE")
    return subprocess.run([BASH, "-c", script], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60)


def calls(tmp_path: Path) -> list[str]:
    log = tmp_path / "calls"
    return log.read_text().splitlines() if log.exists() else []


def test_compiled_once_then_copied_from_the_cache(setup_env):
    env, venv, tmp_path = setup_env
    first = build_kenlm_tools(env)
    assert first.returncode == 0, first.stderr
    assert "compiling KenLM" in first.stdout and any(c.startswith("cmake --build") for c in calls(tmp_path))
    cache = Path(first.stdout.strip().splitlines()[-1].removeprefix("cache="))
    assert cache.name == f"kenlm-0.3.0-order6-{os.uname().machine}-debian12"
    assert {p.name for p in cache.iterdir()} == {"lmplz", "build_binary"}
    assert all(os.access(venv / "bin" / tool, os.X_OK) for tool in ("lmplz", "build_binary"))

    # a new .venv on the same machine: copied, nothing downloaded or compiled, and no compiler needed (apt
    # cannot install one here)
    for tool in ("lmplz", "build_binary"):
        (venv / "bin" / tool).unlink()
    (tmp_path / "calls").unlink()
    second = build_kenlm_tools(env, apt_fails=True)
    assert second.returncode == 0, second.stderr
    assert "copied from" in second.stdout and "compiling" not in second.stdout
    assert calls(tmp_path) == [] and "apt was needed" not in second.stderr
    assert all(os.access(venv / "bin" / tool, os.X_OK) for tool in ("lmplz", "build_binary"))


@pytest.mark.parametrize("status, why", [(127, "error while loading shared libraries"), (126, "cannot execute"),
                                         (139, "Segmentation fault")], ids=["no-boost", "truncated", "crashes"])
def test_a_cached_pair_that_cannot_run_here_is_compiled_again(setup_env, status, why):
    """Binaries whose shared libraries are gone (Boost upgraded), cut short, or crashing are not copied."""
    env, venv, tmp_path = setup_env
    cache = tmp_path / "cache" / "duet" / f"kenlm-0.3.0-order6-{os.uname().machine}-debian12"
    cache.mkdir(parents=True)
    for tool in ("lmplz", "build_binary"):
        (cache / tool).write_text(f"#!/bin/bash\necho '{why}' >&2; exit {status}\n")
        (cache / tool).chmod(0o755)
    done = build_kenlm_tools(env)
    assert done.returncode == 0, done.stderr
    assert "compiling KenLM" in done.stdout and any(c.startswith("cmake --build") for c in calls(tmp_path))
    assert f"exit {status}" not in (venv / "bin" / "lmplz").read_text()  # the freshly built one, in the venv
    assert f"exit {status}" not in (cache / "lmplz").read_text()  # and in the cache
    assert not list(cache.glob(".*.partial"))


def test_a_failed_download_is_one_note_and_the_setup_goes_on(setup_env):
    env, venv, tmp_path = setup_env
    (tmp_path / "pip_fails").touch()
    done = build_kenlm_tools(env)
    assert done.returncode == 0
    assert "KenLM build failed" in done.stderr and "unavailable" in done.stderr
    assert not (venv / "bin" / "lmplz").exists() and not (tmp_path / "cache" / "duet").exists()
