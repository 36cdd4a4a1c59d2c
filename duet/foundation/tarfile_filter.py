"""tarfile's ``filter="data"`` keyword on a Python that predates extraction filters.

NeMo unpacks every ``.nemo`` with ``TarFile.extract(member, path, filter="data")`` (after its own member checks:
no absolute paths, no "..", no links), and duet's LibriSpeech download extracts with ``filter="data"`` too.
Extraction filters (PEP 706) came with Python 3.11.4, 3.10.12 and 3.12; stock Debian 12's python3 is 3.11.2,
where that keyword is a TypeError and no checkpoint restores. On such a Python, :func:`install` lets
``TarFile.extract`` and ``TarFile.extractall`` take the keyword and do the part of the "data" filter that
matters for a model archive: anything but a regular file or a folder is refused (links, devices, FIFOs), and
nothing of the archive's owner or mode is applied to what is written. Elsewhere it does nothing.

Every interpreter of the project's .venv runs :func:`install` at start-up (through ``duet.nemo_targets``'s
``.pth`` file, which tools/setup.sh installs), so that ``ASRModel.restore_from`` works in any script there.
"""

from __future__ import annotations

import tarfile


def has_extraction_filters() -> bool:
    return hasattr(tarfile, "data_filter")


def _refuse_unless_plain(member: tarfile.TarInfo) -> None:
    if not (member.isreg() or member.isdir()):
        raise tarfile.ExtractError(f"{member.name}: not a regular file or a folder; refused (the 'data' extraction "
                                   "filter's rule, applied by duet.foundation.tarfile_filter)")


def with_filter_keyword(extract, extractall):
    """``TarFile.extract`` and ``extractall`` replacements that accept ``filter=`` (any value: every filter
    refuses what the "data" one does here) around the originals given."""

    def extract_filtered(self, member, path="", set_attrs=True, *, numeric_owner=False, filter=None):
        if filter is None:
            return extract(self, member, path, set_attrs=set_attrs, numeric_owner=numeric_owner)
        info = self.getmember(member) if isinstance(member, str) else member
        _refuse_unless_plain(info)
        # set_attrs=False: neither the archive's owner (as root) nor its mode bits (set-uid, ...) are applied
        return extract(self, info, path, set_attrs=False, numeric_owner=numeric_owner)

    def extractall_filtered(self, path=".", members=None, *, numeric_owner=False, filter=None):
        if filter is None:
            return extractall(self, path, members, numeric_owner=numeric_owner)
        chosen = list(self.getmembers() if members is None else members)
        for info in chosen:  # all refused before anything is written, as the filter does
            _refuse_unless_plain(info)
        for info in chosen:
            extract(self, info, path, set_attrs=False, numeric_owner=numeric_owner)

    return extract_filtered, extractall_filtered


def install() -> bool:
    """Patch ``tarfile.TarFile`` where this Python has no extraction filters; True if it did."""
    if has_extraction_filters() or getattr(tarfile.TarFile.extract, "_duet_filter_keyword", False):
        return False
    extract, extractall = with_filter_keyword(tarfile.TarFile.extract, tarfile.TarFile.extractall)
    extract._duet_filter_keyword = True
    tarfile.TarFile.extract, tarfile.TarFile.extractall = extract, extractall
    return True
