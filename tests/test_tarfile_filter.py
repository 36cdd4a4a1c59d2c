"""duet.foundation.tarfile_filter: NeMo's ``extract(..., filter="data")`` on a Python without extraction filters
(stock Debian 12's 3.11.2). The replacements are tried on a TarFile subclass, so this Python's own tarfile (which
may have filters) stays as it is."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile

import pytest

from duet.foundation import tarfile_filter


class OldTarFile(tarfile.TarFile):
    """A TarFile whose extract/extractall are the replacements (over this Python's originals)."""


OldTarFile.extract, OldTarFile.extractall = tarfile_filter.with_filter_keyword(tarfile.TarFile.extract,
                                                                             tarfile.TarFile.extractall)


def archive(path, *, link: bool = False, fifo: bool = False, outside: str | None = None):
    with tarfile.open(path, "w") as tar:
        names = [("model_config.yaml", b"encoder: {}\n"), ("weights/model.ckpt", b"\0" * 64)]
        for name, data in names + ([(outside, b"x")] if outside else []):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.uid = len(data), 0o4777, 12345  # set-uid, world-writable, a foreign owner
            tar.addfile(info, io.BytesIO(data))
        if link:
            info = tarfile.TarInfo("passwd")
            info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
            tar.addfile(info)
        if fifo:
            info = tarfile.TarInfo("pipe")
            info.type = tarfile.FIFOTYPE
            tar.addfile(info)
    return path


def test_extract_takes_the_filter_keyword_and_drops_unsafe_mode_bits(tmp_path):
    out = tmp_path / "out"
    with OldTarFile.open(archive(tmp_path / "m.nemo")) as tar:
        for member in tar.getmembers():
            tar.extract(member, out, filter="data")  # what NeMo's safe_extract calls
    assert (out / "model_config.yaml").read_bytes() == b"encoder: {}\n"
    assert (out / "weights" / "model.ckpt").stat().st_size == 64
    assert (out / "model_config.yaml").stat().st_mode & 0o7777 == 0o755  # no set-uid, no group/other write
    assert (out / "model_config.yaml").stat().st_uid == os.getuid()


@pytest.mark.parametrize("kind, message", [
    ({"link": True}, "passwd: not a regular file or a folder"),
    ({"fifo": True}, "pipe: not a regular file or a folder"),
    ({"outside": "../escaped.txt"}, "../escaped.txt: outside the destination folder"),
    ({"outside": "/tmp/absolute.txt"}, "/tmp/absolute.txt: outside the destination folder"),
], ids=["symlink", "fifo", "dot-dot", "absolute"])
def test_what_the_data_filter_refuses_is_refused_before_anything_is_written(tmp_path, kind, message):
    out = tmp_path / "out"
    with OldTarFile.open(archive(tmp_path / "a.tar", **kind)) as tar:
        with pytest.raises(tarfile.ExtractError, match=message):
            tar.extractall(out, filter="data")
        with pytest.raises(tarfile.ExtractError, match=message):
            tar.extract(tar.getmembers()[-1], out, filter="data")
    assert not out.exists() and not (tmp_path / "escaped.txt").exists()


def test_extractall_writes_every_plain_member_and_calls_a_callable_filter(tmp_path):
    with OldTarFile.open(archive(tmp_path / "m.nemo")) as tar:
        tar.extractall(tmp_path / "all", filter="data")
        seen = []
        tar.extractall(tmp_path / "some", filter=lambda m, path: seen.append(m.name) or (m if m.name.endswith(
            ".yaml") else None))
    assert sorted(p.relative_to(tmp_path / "all").as_posix() for p in (tmp_path / "all").rglob("*") if p.is_file()) \
        == ["model_config.yaml", "weights/model.ckpt"]
    assert seen == ["model_config.yaml", "weights/model.ckpt"]
    assert [p.name for p in (tmp_path / "some").rglob("*") if p.is_file()] == ["model_config.yaml"]


def test_install_patches_only_a_python_without_filters():
    """Run in a fresh interpreter (whose start-up may already have run install() through the .venv's .pth);
    tarfile.data_filter is then removed to play an old Python where it exists."""
    code = ("import tarfile; from duet.foundation import tarfile_filter as f; had = hasattr(tarfile, 'data_filter'); "
            "before = getattr(tarfile.TarFile.extract, '_duet_filter_keyword', False); first = f.install(); "
            "tarfile.__dict__.pop('data_filter', None); second = f.install(); third = f.install(); "
            "print(had, before or first, second, third, 'filter' in tarfile.TarFile.extract.__code__.co_varnames)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    had, patched_first, second, third, keyword = done.stdout.split()
    if had == "True":  # a Python with filters: nothing until they are gone, then patched once
        assert (patched_first, second) == ("False", "True")
    else:  # an old Python: patched at start-up or by the first call, not again
        assert (patched_first, second) == ("True", "False")
    assert (third, keyword) == ("False", "True")
