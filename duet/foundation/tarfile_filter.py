"""tarfile's ``filter="data"`` keyword on a Python that predates extraction filters.

NeMo unpacks every ``.nemo`` with ``TarFile.extract(member, path, filter="data")`` (after its own member checks:
no absolute paths, no "..", no links), and duet's LibriSpeech download extracts with ``filter="data"`` too.
Extraction filters (PEP 706) came with Python 3.11.4, 3.10.12 and 3.12; stock Debian 12's python3 is 3.11.2,
where that keyword is a TypeError and no checkpoint restores. On such a Python, :func:`install` lets
``TarFile.extract`` and ``TarFile.extractall`` take the keyword and apply the rules of the "data" filter that
matter for model and corpus archives: only regular files and folders, never an absolute name or one with "..",
and no set-uid/set-gid/sticky bits, group/other write permission or archive owner on what is written (the
extracting user owns it). A callable filter is called first, as Python's own extractor does. Elsewhere
:func:`install` does nothing.

Every interpreter of the project's .venv runs :func:`install` at start-up (through ``duet.nemo_targets``'s
``.pth`` file, which tools/setup.sh installs), so that ``ASRModel.restore_from`` works in any script there.
"""

from __future__ import annotations

import copy
import os
import tarfile
from pathlib import PurePosixPath


def has_extraction_filters() -> bool:
    return hasattr(tarfile, "data_filter")


def data_member(member: tarfile.TarInfo) -> tarfile.TarInfo:
    """``member`` as the "data" filter lets it through (a copy), or ``tarfile.ExtractError`` naming why not."""
    name = PurePosixPath(member.name)
    if name.is_absolute() or ".." in name.parts:
        raise tarfile.ExtractError(f"{member.name}: outside the destination folder; refused (the 'data' "
                                   "extraction filter's rule, applied by duet.foundation.tarfile_filter)")
    if not (member.isreg() or member.isdir()):
        raise tarfile.ExtractError(f"{member.name}: not a regular file or a folder; refused (the 'data' "
                                   "extraction filter's rule, applied by duet.foundation.tarfile_filter)")
    safe = copy.copy(member)
    safe.mode = (member.mode & 0o755) | (0o700 if member.isdir() else 0o600)
    safe.uid, safe.gid, safe.uname, safe.gname = os.getuid(), os.getgid(), "", ""
    return safe


def _filtered(member: tarfile.TarInfo, path: str, filter) -> tarfile.TarInfo | None:
    if callable(filter):
        member = filter(member, path)
        if member is None:
            return None
    return data_member(member)


def with_filter_keyword(extract, extractall):
    """``TarFile.extract`` and ``extractall`` replacements that accept ``filter=`` around the originals given."""

    def extract_filtered(self, member, path="", set_attrs=True, *, numeric_owner=False, filter=None):
        if filter is None:
            return extract(self, member, path, set_attrs=set_attrs, numeric_owner=numeric_owner)
        info = _filtered(self.getmember(member) if isinstance(member, str) else member, str(path), filter)
        if info is not None:
            extract(self, info, path, set_attrs=set_attrs, numeric_owner=True)

    def extractall_filtered(self, path=".", members=None, *, numeric_owner=False, filter=None):
        if filter is None:
            return extractall(self, path, members, numeric_owner=numeric_owner)
        # every member checked before anything is written
        chosen = [_filtered(m, str(path), filter) for m in (self.getmembers() if members is None else members)]
        kept = [m for m in chosen if m is not None]
        # folders last, as extractall does, so that writing their files cannot undo their modes
        for info in sorted(kept, key=lambda m: m.isdir()):
            extract(self, info, path, set_attrs=True, numeric_owner=True)

    return extract_filtered, extractall_filtered


def install() -> bool:
    """Patch ``tarfile.TarFile`` where this Python has no extraction filters; True if it did (now)."""
    if has_extraction_filters() or getattr(tarfile.TarFile.extract, "_duet_filter_keyword", False):
        return False
    extract, extractall = with_filter_keyword(tarfile.TarFile.extract, tarfile.TarFile.extractall)
    extract._duet_filter_keyword = True
    tarfile.TarFile.extract, tarfile.TarFile.extractall = extract, extractall
    return True
