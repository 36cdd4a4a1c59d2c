"""LibriSpeech download (duet/data/librispeech.py, tools/make_manifest.py --download), issue 19 item 14: rehearsed
against a stand-in OpenSLR on 127.0.0.1 that drops the first connection halfway. Nothing beyond 127.0.0.1."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tarfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from duet.data import librispeech
from tests.audio_fixtures import write_chapter

UTTERANCES = {(84, 121123): {0: ("GO DO YOU HEAR", 1.0), 1: ("BUT IN LESS THAN FIVE MINUTES", 1.5)},
              (174, 50561): {0: ("FORGOTTEN TOO THE NAME OF GILLIAN", 1.25), 1: ("AND WHEN", 0.75)}}


class StandInOpenSlr(BaseHTTPRequestHandler):
    """Serves the files of ``folder`` with Range support; the first request for an archive gets half of it and
    then the connection closes, as a flaky link would."""

    folder: Path
    requests: list[tuple[str, str | None]]

    def do_HEAD(self):
        self.requests.append(("HEAD " + self.path, None))
        path = self.folder / self.path.lstrip("/")
        if not path.is_file():
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(path.stat().st_size))
        self.end_headers()

    def do_GET(self):
        self.requests.append((self.path, self.headers.get("Range")))
        path = self.folder / self.path.lstrip("/")
        if not path.is_file():
            self.send_error(404)
            return
        data = path.read_bytes()
        start = int(self.headers["Range"].removeprefix("bytes=").split("-")[0]) if self.headers.get("Range") else 0
        if start >= len(data) > 0:
            self.send_response(416)
            self.send_header("Content-Range", f"bytes */{len(data)}")
            self.end_headers()
            return
        self.send_response(206 if start else 200)
        if start:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        self.send_header("Content-Length", str(len(data) - start))
        self.end_headers()
        first_archive_request = path.suffix == ".gz" and sum(p == self.path for p, _ in self.requests) == 1
        self.wfile.write(data[start : len(data) // 2] if first_archive_request else data[start:])
        self.close_connection = True

    def log_message(self, *args):
        pass


@pytest.fixture
def stand_in_openslr(tmp_path):
    """(base URL, request log, archive bytes) of a local server holding dev-clean.tar.gz and md5sum.txt."""
    staging = tmp_path / "staging"
    for (speaker, chapter), utterances in UTTERANCES.items():
        write_chapter(staging / "LibriSpeech" / "dev-clean", speaker, chapter, utterances)
    (staging / "LibriSpeech" / "README.TXT").write_text("stand-in\n")
    served = tmp_path / "served"
    served.mkdir()
    with tarfile.open(served / "dev-clean.tar.gz", "w:gz") as tar:
        tar.add(staging / "LibriSpeech", arcname="LibriSpeech")
    archive = (served / "dev-clean.tar.gz").read_bytes()
    (served / "md5sum.txt").write_text(f"{hashlib.md5(archive).hexdigest()}  dev-clean.tar.gz\n")
    handler = type("Handler", (StandInOpenSlr,), {"folder": served, "requests": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler.requests, archive
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.integration
def test_download_resumes_verifies_extracts_and_builds_the_manifest(stand_in_openslr, tmp_path, python, repo_root):
    base_url, requests, archive = stand_in_openslr
    env = {k: v for k, v in os.environ.items() if k.lower() not in ("http_proxy", "https_proxy", "all_proxy")}
    env.update(NO_PROXY="127.0.0.1", LIBRISPEECH_BASE_URL=base_url)  # the mirror from the environment
    downloads, corpus, out = tmp_path / "downloads", tmp_path / "corpus", tmp_path / "manifests"
    command = [python, "tools/make_manifest.py", "--download", "dev-clean", "--download-dir", str(downloads),
               "--data-root", str(corpus), "--md5sums", f"{base_url}/md5sum.txt", "--out-dir", str(out), "--jobs", "1"]
    result = subprocess.run(command, cwd=repo_root, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    half = len(archive) // 2
    assert requests == [("/md5sum.txt", None), ("HEAD /dev-clean.tar.gz", None), ("/dev-clean.tar.gz", "bytes=0-"),
                        ("/dev-clean.tar.gz", f"bytes={half}-")]
    assert f"connection lost after {half} of {len(archive)} bytes; resuming" in result.stdout and "(MD5 verified)" in result.stdout
    assert (downloads / "dev-clean.tar.gz").read_bytes() == archive
    assert not (downloads / "dev-clean.tar.gz.part").exists()
    entries = [json.loads(line) for line in (out / "dev-clean.json").read_text().splitlines()]
    assert sorted(e["text"] for e in entries) == sorted(t.lower() for u in UTTERANCES.values() for t, _ in u.values())
    assert all(Path(e["audio_filepath"]).is_relative_to(corpus / "dev-clean") for e in entries)

    again = subprocess.run(command, cwd=repo_root, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "dev-clean: already extracted" in again.stdout and "up to date" in again.stdout
    assert [path for path, _ in requests[4:]] == ["/md5sum.txt"]  # the archive is not fetched again


def test_base_url_option_wins_over_the_environment(monkeypatch):
    from tests.test_manifest import make_manifest

    monkeypatch.setenv("LIBRISPEECH_BASE_URL", "http://127.0.0.1:9/env")
    assert make_manifest.get_parser().parse_args([]).base_url == "http://127.0.0.1:9/env"
    assert make_manifest.get_parser().parse_args(["--base-url", "http://127.0.0.1:9/opt"]).base_url.endswith("/opt")
    monkeypatch.delenv("LIBRISPEECH_BASE_URL")
    assert make_manifest.get_parser().parse_args([]).base_url == librispeech.OPENSLR_BASE_URL


def test_md5sums_lines_are_parsed_and_a_bad_line_is_named():
    sums = librispeech.parse_md5sums("42E2234BA48799C1F50F24A7926300A1  dev-clean.tar.gz\n\n", "sums.txt")
    assert sums == {"dev-clean": "42e2234ba48799c1f50f24a7926300a1"}
    with pytest.raises(librispeech.DownloadError, match="sums.txt line 1"):
        librispeech.parse_md5sums("nonsense\n", "sums.txt")
