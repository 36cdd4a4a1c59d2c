"""Download LibriSpeech splits from OpenSLR (resource 12) with MD5 verification.

The archive goes to a temporary name and is renamed only after its checksum matches; extraction
goes to a temporary folder renamed into place, so an interrupted download leaves nothing half-done.
"""

from __future__ import annotations

import hashlib
import shutil
import tarfile
import tempfile
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable
from duet.errors import DuetError

OPENSLR_URL = "https://www.openslr.org/resources/12/{split}.tar.gz"

# Published MD5 sums of the archives (OpenSLR's md5sum.txt for resource 12).
ARCHIVE_MD5 = {
    "dev-clean": "42e2234ba48799c1f50f24a7926300a1",
    "dev-other": "c8d0bcc9cca99d4f8b62fcc847357931",
    "test-clean": "32fa31d27d2e1cad72775fee3f4849a9",
    "test-other": "fb5a50374b501bb3bac4815ee91d3135",
    "train-clean-100": "2a93770f6d5c6c964bc36631d331a522",
    "train-clean-360": "c0e676e450a7ff2f54aeade5171606fa",
    "train-other-500": "d1a0fd59409feb2c614ce4d30c387708",
}


class DownloadError(DuetError, RuntimeError):
    """A one-line, user-facing reason why a split could not be fetched."""


def md5_of(path: Path, chunk_bytes: int = 1 << 20) -> str:
    digest = hashlib.md5()
    with open(path, "rb") as f:
        while chunk := f.read(chunk_bytes):
            digest.update(chunk)
    return digest.hexdigest()


def fetch_archive(split: str, download_dir: Path, timeout_s: float = 20.0,
                  progress: Callable[[int, int | None], None] | None = None) -> Path:
    """Download ``<split>.tar.gz`` into ``download_dir`` (reusing a verified copy) and return its path."""
    if split not in ARCHIVE_MD5:
        raise DownloadError(f"unknown LibriSpeech split {split!r}; known: {', '.join(ARCHIVE_MD5)}")
    download_dir.mkdir(parents=True, exist_ok=True)
    archive = download_dir / f"{split}.tar.gz"
    if archive.exists() and md5_of(archive) == ARCHIVE_MD5[split]:
        return archive
    url = OPENSLR_URL.format(split=split)
    partial = archive.with_name(archive.name + ".part")
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response, open(partial, "wb") as out:
            total = int(response.headers.get("Content-Length") or 0) or None
            done = 0
            while chunk := response.read(1 << 20):
                out.write(chunk)
                done += len(chunk)
                if progress:
                    progress(done, total)
    except (urllib.error.URLError, OSError) as e:
        partial.unlink(missing_ok=True)
        reason = getattr(e, "reason", e)
        raise DownloadError(
            f"cannot download {url} ({reason}); fetch LibriSpeech elsewhere and pass --data-root, "
            "or run without --download to use the bundled samples/ corpus"
        ) from None
    actual = md5_of(partial)
    if actual != ARCHIVE_MD5[split]:
        partial.unlink()
        raise DownloadError(f"{url}: MD5 {actual} does not match the published {ARCHIVE_MD5[split]}; download again")
    partial.rename(archive)
    return archive


def extract_split(archive: Path, corpus_root: Path) -> Path:
    """Extract ``LibriSpeech/<split>`` from ``archive`` into ``corpus_root/<split>``; returns that folder."""
    split = archive.name.removesuffix(".tar.gz")
    target = corpus_root / split
    if target.exists():
        return target
    corpus_root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=corpus_root, prefix=f".{split}.") as tmp:
        with tarfile.open(archive) as tar:
            tar.extractall(tmp, filter="data")  # "data" refuses absolute paths and links out of tmp
        extracted = Path(tmp) / "LibriSpeech" / split
        if not extracted.is_dir():
            raise DownloadError(f"{archive} does not contain LibriSpeech/{split}/")
        shutil.move(str(extracted), target)
    return target
