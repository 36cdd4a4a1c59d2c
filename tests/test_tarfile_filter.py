"""duet.foundation.tarfile_filter: NeMo's ``extract(..., filter="data")`` on a Python without extraction filters
(stock Debian 12's 3.11.2). The replacements are tried on a TarFile subclass, so this Python's own tarfile (which
may have filters) stays as it is."""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile

import pytest

from duet.foundation import tarfile_filter


class OldTarFile(tarfile.TarFile):
    """A TarFile whose extract/extractall are the replacements (over this Python's originals)."""


OldTarFile.extract, OldTarFile.extractall = tarfile_filter.with_filter_keyword(tarfile.TarFile.extract,
                                                                             tarfile.TarFile.extractall)


def archive(path, *, link: bool = False, fifo: bool = False):
    with tarfile.open(path, "w") as tar:
        for name, data in (("model_config.yaml", b"encoder: {}\n"), ("weights/model.ckpt", b"\0" * 64)):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.uid = len(data), 0o4755, 12345  # set-uid and a foreign owner
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


def test_extract_takes_the_filter_keyword_and_applies_no_mode_or_owner(tmp_path):
    out = tmp_path / "out"
    with OldTarFile.open(archive(tmp_path / "m.nemo")) as tar:
        for member in tar.getmembers():
            tar.extract(member, out, filter="data")  # what NeMo's safe_extract calls
    assert (out / "model_config.yaml").read_bytes() == b"encoder: {}\n"
    assert (out / "weights" / "model.ckpt").stat().st_size == 64
    assert not (out / "model_config.yaml").stat().st_mode & 0o4000  # no set-uid from the archive


def test_links_and_special_files_are_refused(tmp_path):
    out = tmp_path / "out"
    with OldTarFile.open(archive(tmp_path / "m.nemo", link=True)) as tar:
        with pytest.raises(tarfile.ExtractError, match="passwd: not a regular file or a folder"):
            tar.extract("passwd", out, filter="data")
    with OldTarFile.open(archive(tmp_path / "f.tar", fifo=True)) as tar:
        with pytest.raises(tarfile.ExtractError, match="pipe: not a regular file"):
            tar.extractall(out / "all", filter="data")
    assert not (out / "all").exists()  # refused before anything was written


def test_extractall_with_the_keyword_writes_every_plain_member(tmp_path):
    with OldTarFile.open(archive(tmp_path / "m.nemo")) as tar:
        tar.extractall(tmp_path / "all", filter="data")
    assert sorted(p.relative_to(tmp_path / "all").as_posix() for p in (tmp_path / "all").rglob("*") if p.is_file()) \
        == ["model_config.yaml", "weights/model.ckpt"]


def test_install_patches_only_a_python_without_filters():
    """Run in a fresh interpreter: there, tarfile.data_filter is removed to play an old Python where it exists."""
    code = ("import tarfile; from duet.foundation import tarfile_filter as f; had = hasattr(tarfile, 'data_filter'); "
            "first = f.install(); tarfile.__dict__.pop('data_filter', None); second = f.install(); "
            "third = f.install(); print(had, first, second or first, third, "
            "'filter' in tarfile.TarFile.extract.__code__.co_varnames)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    had, first, patched, third, keyword = done.stdout.split()
    assert first == ("False" if had == "True" else "True")  # nothing done where filters exist
    assert (patched, third, keyword) == ("True", "False", "True")  # patched once, then left alone
