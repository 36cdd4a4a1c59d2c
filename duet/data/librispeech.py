"""Download LibriSpeech splits from OpenSLR (resource 12), or a mirror of it, with MD5 verification.

The archive is fetched to ``<split>.tar.gz.part`` with lhotse's ``resumable_download`` (an HTTP Range request
from the bytes already there), so a dropped connection resumes rather than restarting: a few times within one
run, and in the next run from what the last one left. It is renamed into place only after its MD5 matches;
extraction goes to a temporary folder renamed into place, so an interrupted run leaves nothing half-done.
"""

from __future__ import annotations

import hashlib
import http.client
import shutil
import socket
import tarfile
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from duet.errors import DuetError

OPENSLR_BASE_URL = "https://www.openslr.org/resources/12"
#: environment variable that replaces OPENSLR_BASE_URL (a mirror); ``--base-url`` wins over it
BASE_URL_ENV = "LIBRISPEECH_BASE_URL"

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


@dataclass(frozen=True)
class DownloadSettings:
    """Where archives come from and how they are checked."""

    base_url: str = OPENSLR_BASE_URL  # <base_url>/<split>.tar.gz
    md5: dict[str, str] = field(default_factory=lambda: dict(ARCHIVE_MD5))  # split -> expected archive MD5
    timeout_s: float = 20.0  # a connection silent this long counts as dropped
    attempts: int = 5  # connections per archive in one run; each resumes where the last one stopped

    def validate(self) -> "DownloadSettings":
        if urllib.parse.urlsplit(self.base_url).scheme not in ("http", "https", "file"):
            raise DownloadError(f"base URL {self.base_url!r} is not an http(s):// or file:// URL")
        if self.attempts < 1 or self.timeout_s <= 0:
            raise DownloadError(f"attempts must be >= 1 and timeout > 0, got {self.attempts} and {self.timeout_s:g}")
        return self

    def url_of(self, split: str) -> str:
        return f"{self.base_url.rstrip('/')}/{split}.tar.gz"


def parse_md5sums(text: str, source: str) -> dict[str, str]:
    """``split -> MD5`` from md5sum-format lines (``<hex>  <split>.tar.gz``), as OpenSLR publishes them."""
    sums = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split()
        if len(parts) != 2 or len(parts[0]) != 32 or not parts[1].lstrip("*").endswith(".tar.gz"):
            raise DownloadError(f"{source} line {number}: expected '<md5>  <split>.tar.gz', got {line.strip()!r}")
        sums[Path(parts[1].lstrip("*")).name.removesuffix(".tar.gz")] = parts[0].lower()
    return sums


def read_md5sums(path_or_url: str, timeout_s: float = 20.0) -> dict[str, str]:
    """An md5sum-format file, local or at an http(s) URL (a mirror's list for archives it repacked)."""
    try:
        if urllib.parse.urlsplit(path_or_url).scheme in ("http", "https", "file"):
            with urllib.request.urlopen(path_or_url, timeout=timeout_s) as response:
                text = response.read().decode("utf-8")
        else:
            text = Path(path_or_url).read_text(encoding="utf-8")
    except (urllib.error.URLError, OSError, UnicodeDecodeError) as e:
        raise DownloadError(f"cannot read MD5 list {path_or_url} ({getattr(e, 'reason', e)})") from None
    return parse_md5sums(text, path_or_url)


def md5_of(path: Path, chunk_bytes: int = 1 << 20) -> str:
    digest = hashlib.md5()
    with open(path, "rb") as f:
        while chunk := f.read(chunk_bytes):
            digest.update(chunk)
    return digest.hexdigest()


@contextmanager
def _socket_timeout(seconds: float) -> Iterator[None]:
    """lhotse's download opens its connection without a timeout: bound it, so a stalled server is a dropped one."""
    before = socket.getdefaulttimeout()
    socket.setdefaulttimeout(seconds)
    try:
        yield
    finally:
        socket.setdefaulttimeout(before)


def _content_length(url: str, timeout_s: float) -> int | None:
    """The archive's size from a HEAD request (None when the server does not say), to tell a finished
    download from one whose connection closed early."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout_s) as response:
            return int(response.headers.get("Content-Length") or 0) or None
    except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError):
        return None  # the GET that follows reports an unreachable server


def fetch_archive(split: str, download_dir: Path, settings: DownloadSettings = DownloadSettings()) -> Path:
    """Download ``<split>.tar.gz`` into ``download_dir`` (reusing a verified copy, resuming a partial one) and
    return its path once its MD5 matches."""
    # lhotse imports torch (~8 s): paid only when something is downloaded
    from lhotse.utils import resumable_download

    settings.validate()
    if split not in settings.md5:
        raise DownloadError(f"no MD5 known for split {split!r}; known: {', '.join(settings.md5)}")
    expected = settings.md5[split]
    download_dir.mkdir(parents=True, exist_ok=True)
    archive = download_dir / f"{split}.tar.gz"
    if archive.exists() and md5_of(archive) == expected:
        return archive
    url = settings.url_of(split)
    partial = archive.with_name(archive.name + ".part")
    total = _content_length(url, settings.timeout_s)
    for attempt in range(1, settings.attempts + 1):
        failure = None
        try:
            with _socket_timeout(settings.timeout_s):
                resumable_download(url, filename=partial)
        except (urllib.error.URLError, http.client.HTTPException, OSError) as e:
            failure = getattr(e, "reason", None) or e.__class__.__name__ + (f": {e}" if str(e) else "")
        if partial.exists() and partial.stat().st_size == 0:
            partial.unlink()
        have = partial.stat().st_size if partial.exists() else 0
        # http.client ends a body cut short as if it were complete (lhotse cannot tell): the size says
        if failure is None and (total is None or have >= total):
            break
        if attempt == settings.attempts or not have:  # nothing came through: not a dropped transfer
            kept = f"; {partial} ({have} of {total or '?'} bytes) is kept for the next run" if have else ""
            raise DownloadError(
                f"cannot download {url} ({failure or 'connection closed early'}){kept}; fetch LibriSpeech "
                "elsewhere and pass --data-root, or run without --download to use the bundled samples/ corpus"
            )
        print(f"{split}: connection lost after {have} of {total or '?'} bytes; resuming "
              f"({attempt}/{settings.attempts - 1})", flush=True)
    actual = md5_of(partial)
    if actual != expected:
        partial.unlink()
        raise DownloadError(f"{url}: MD5 {actual} does not match the expected {expected}; download again")
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
