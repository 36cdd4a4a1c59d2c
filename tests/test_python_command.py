"""duet.foundation.python_command: a hint or "next:" line names the interpreter as the user types it in the shell that
started the tool (``python`` in an activated venv, ``.venv/bin/python`` typed in the repository otherwise), and the
command printed runs this very interpreter there."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import duet.foundation as foundation
from duet.foundation import python_command

REPO = Path(__file__).resolve().parent.parent


def fake_environment(root: Path) -> Path:
    """``root/env/bin/python`` and ``python3`` linked to one file (as a venv's are), and ``root/other/bin/python``, a
    link to the same file from another folder (as the system's python is to a venv's)."""
    interpreter = root / "real" / "python3.11"
    interpreter.parent.mkdir(parents=True)
    interpreter.write_text("")
    interpreter.chmod(0o755)  # what shutil.which looks for
    for folder in ("env", "other"):
        (root / folder / "bin").mkdir(parents=True)
    for link in ("env/bin/python", "env/bin/python3", "other/bin/python"):
        (root / link).symlink_to(interpreter)
    return root / "env" / "bin" / "python"


@pytest.mark.parametrize("path_dirs, cwd, expected", [
    (["env/bin", "other/bin"], ".", "python"),  # an activated venv
    (["other/bin"], ".", "env/bin/python"),  # another python on PATH: the path, relative under the current folder
    (["other/bin"], "env/bin", "./python"),  # a path without a slash would be looked up on PATH
    ([], "other", None),  # no python on PATH, the interpreter outside the current folder: its absolute path
])
def test_the_interpreter_is_named_as_the_shell_that_started_the_tool_runs_it(tmp_path, monkeypatch, path_dirs, cwd,
                                                                           expected):
    executable = fake_environment(tmp_path)
    monkeypatch.setattr(foundation.sys, "executable", str(executable))
    monkeypatch.setenv("PATH", os.pathsep.join(str(tmp_path / d) for d in path_dirs) or str(tmp_path / "empty"))
    monkeypatch.chdir(tmp_path / cwd)
    assert python_command("tools/demo.py", "--from", "asr") == f"{expected or executable} tools/demo.py --from asr"


def test_python3_is_named_when_only_that_name_runs_the_interpreter(tmp_path, monkeypatch):
    executable = fake_environment(tmp_path)
    (tmp_path / "env" / "bin" / "python").unlink()
    monkeypatch.setattr(foundation.sys, "executable", str(tmp_path / "env" / "bin" / "python3"))
    monkeypatch.setenv("PATH", os.pathsep.join([str(executable.parent), str(tmp_path / "other" / "bin")]))
    assert python_command() == "python3"


def test_a_path_with_a_space_is_quoted(tmp_path, monkeypatch):
    executable = fake_environment(tmp_path / "my envs")
    monkeypatch.setattr(foundation.sys, "executable", str(executable))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.chdir(tmp_path)
    assert shlex.split(python_command("tools/demo.py")) == ["my envs/env/bin/python", "tools/demo.py"]


def hint_of_a_tool(env: dict[str, str]) -> str:
    """The command tools/train_tokenizer.py names when its manifest is missing, run from the repository."""
    proc = subprocess.run([sys.executable, "tools/train_tokenizer.py", "--manifests", "manifests/none.json"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr[-2000:]
    return proc.stderr.split("(build it with ", 1)[1].split(")", 1)[0]


@pytest.mark.integration
def test_a_tools_hint_runs_this_interpreter_as_typed_in_the_shell_that_ran_it():
    """Once as in an activated venv (this interpreter's folder first on PATH), once as in a stock shell (no python on
    PATH): the first word of the hint, typed in that shell, is this Python."""
    activated = {**os.environ, "PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin", "/bin"])}
    stock = {**os.environ, "PATH": str(REPO / "no-such-folder")}
    for env, word in ((activated, "python"), (stock, None)):
        hint = shlex.split(hint_of_a_tool(env))
        assert hint[1:] == ["tools/make_manifest.py"]
        assert word is None or hint[0] == word
        typed = subprocess.run([*hint[:1], "-c", "import sys; print(sys.prefix)"], cwd=REPO, env=env,
                               capture_output=True, text=True, timeout=60)
        assert typed.stdout.strip() == sys.prefix
