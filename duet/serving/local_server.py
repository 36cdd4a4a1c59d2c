"""``tools/serve.py`` in a child process on a free loopback port, for the benches that drive it
(``bench/serve_load.py``, ``bench/turn_latency.py``), and its resident memory (now, or the peak while a block runs)."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

from duet.errors import DuetError
from duet.foundation import EXPERIMENTS, REPO_ROOT


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def rss_mb(pid: int | None) -> float | None:
    """Resident memory of process ``pid`` in MiB (Linux /proc), or None."""
    if pid is None:
        return None
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


class PeakRss:
    """The highest resident memory (MiB) of process ``pid`` while the block runs, sampled every 50 ms (None when it
    cannot be read)."""

    def __init__(self, pid: int | None):
        self.pid, self.peak, self._stop = pid, None, threading.Event()

    def _sample(self) -> None:
        while not self._stop.is_set():
            rss = rss_mb(self.pid)
            if rss is not None and (self.peak is None or rss > self.peak):
                self.peak = rss
            self._stop.wait(0.05)

    def __enter__(self):
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def add_bench_arguments(parser, name: str) -> None:
    """A server bench's ``--url`` (a running server, else one is started) and ``--json`` (its figures, by default
    experiments/bench/<name>.json)."""
    parser.add_argument("--url", default=None, help="a running server (default: start tools/serve.py)")
    parser.add_argument("--json", type=Path, default=EXPERIMENTS / "bench" / f"{name}.json",
                        help="where the figures go")


def split_serve_args(argv: list[str] | None) -> tuple[list[str], list[str]]:
    """A bench's own arguments and those after ``--``, which go to tools/serve.py."""
    argv = sys.argv[1:] if argv is None else argv
    return (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])


def start_server(serve_args: list[str], log: Path, wait_s: float = 300.0) -> tuple[subprocess.Popen, str]:
    """tools/serve.py on a free 127.0.0.1 port (OMP_NUM_THREADS as this process has it), its output to ``log``;
    returns the process and its URL once /health answers."""
    port = free_port()
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as out:
        process = subprocess.Popen([sys.executable, str(REPO_ROOT / "tools" / "serve.py"), "--host", "127.0.0.1",
                                    "--port", str(port), *serve_args], stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise DuetError(f"tools/serve.py exited with code {process.returncode} (log: {log})")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return process, url
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    stop_server(process)
    raise DuetError(f"tools/serve.py did not answer /health within {wait_s:g} s (log: {log})")


def stop_server(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(30)
