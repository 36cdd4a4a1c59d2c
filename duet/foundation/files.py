"""Small file helpers shared by every tool: atomic writes, JSON Lines, native and library output to a log (and the
``--verbose``/``--log`` options that choose where that goes)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Iterable, Iterator, TextIO

from duet.foundation.errors import DiskFullError, is_disk_full
from duet.foundation import EXPERIMENTS, REPO_ROOT

# Where a tool's library output (NeMo, Lightning, transformers, warnings) goes without --verbose: <tool>.log here.
LOG_DIR = EXPERIMENTS / "logs"


@contextlib.contextmanager
def atomic_path(final_path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``final_path``; rename it into place only if the block succeeds.

    An interrupted or failing run therefore never leaves a half-written output behind. A full disk while the
    block writes the temporary file is a :class:`DiskFullError` naming ``final_path`` (what the user asked for,
    not the temporary name), which ``cli`` prints in one line.
    """
    final_path = Path(final_path)
    try:
        final_path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{final_path.name}.", suffix=".tmp", dir=final_path.parent)
    except OSError as e:
        if not is_disk_full(e):
            raise
        raise DiskFullError(final_path, e.errno) from e
    os.close(fd)
    # mkstemp creates 0600; give the output the permissions an ordinary open() would (umask applied).
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp_name, 0o666 & ~umask)
    tmp_path = Path(tmp_name)
    try:
        yield tmp_path
        os.replace(tmp_path, final_path)
    except OSError as e:
        # a full disk naming another file (one the block wrote of its own) is that file's to report
        if not is_disk_full(e) or isinstance(e, DiskFullError) or e.filename not in (None, tmp_name):
            raise
        raise DiskFullError(final_path, e.errno) from e
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_jsonl_atomic(path: str | os.PathLike, records: Iterable[dict]) -> int:
    """Write one JSON object per line; returns the number of lines written."""
    count = 0
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
            count += 1
    return count


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    """Read a JSON Lines file; a malformed line raises ValueError naming the file and line number."""
    return [record for _, record in numbered_jsonl(path)]


def numbered_jsonl(path: str | os.PathLike) -> Iterator[tuple[int, object]]:
    """(line number, parsed value) of every non-blank line, so that a caller checking the values can name
    the line; a malformed line raises ValueError naming the file and line number."""
    with open(path, encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                yield line_no, json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{line_no}: not valid JSON ({e.msg})") from None


@contextlib.contextmanager
def native_output_to(log_path: str | os.PathLike) -> Iterator[None]:
    """Send what C/C++ code writes to stdout/stderr (e.g. SentencePiece's trainer log) into a file.

    Python-level redirection does not reach native code, so this swaps the process's file descriptors.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    with open(log_path, "ab") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)


def _console(stream: TextIO) -> tuple[TextIO, bool]:
    """A stream to where ``stream`` writes now, which a later swap of file descriptors 1 and 2 does not move, and
    whether it is a new one to close. A stream without a file descriptor (a test's capture) is kept as it is."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is both an OSError and a ValueError
        return stream, False
    return os.fdopen(os.dup(fd), "w", buffering=1, encoding=getattr(stream, "encoding", None) or "utf-8",
                     errors=getattr(stream, "errors", None) or "strict"), True


@contextlib.contextmanager
def library_output_to(log_path: str | os.PathLike | None) -> Iterator[tuple[TextIO, TextIO]]:
    """Keep the console for a tool's own lines: yields ``(out, err)``, the console's standard output and error,
    while everything else the process writes to file descriptors 1 and 2 (NeMo's, Lightning's and transformers'
    log lines, Python warnings, native code, worker processes started meanwhile) goes to ``log_path``, truncated
    first so that it holds this run's. With ``log_path`` None (a tool's ``--verbose``) all of that goes to standard
    error instead, so standard output still carries only what is written to ``out``.

    NeMo's logger holds the ``sys.stdout``/``sys.stderr`` it found at import and prints through them: only a swap
    of the file descriptors under them reaches it (as :func:`native_output_to` does for C code).
    """
    sys.stdout.flush()
    sys.stderr.flush()
    (out, close_out), (err, close_err) = _console(sys.stdout), _console(sys.stderr)
    saved = [os.dup(1), os.dup(2)]
    log = None
    try:
        if log_path is None:
            os.dup2(2, 1)
        else:
            Path(log_path).parent.mkdir(parents=True, exist_ok=True)
            log = open(log_path, "wb")
            os.dup2(log.fileno(), 1)
            os.dup2(log.fileno(), 2)
        yield out, err
    finally:
        for stream in (sys.stdout, sys.stderr, out, err):
            stream.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved:
            os.close(fd)
        if log is not None:
            log.close()
        for stream, close in ((out, close_out), (err, close_err)):
            if close:
                stream.close()


def add_log_arguments(parser: argparse.ArgumentParser, tool: str) -> None:
    """``--verbose`` and ``--log``: the libraries' log lines go to a file unless ``--verbose`` shows them (on standard
    error); the tool's own lines stay on the console either way (:func:`library_output_to`). Here, below both
    packages, so that ``slm``'s scripts take the same options as ``duet``'s tools."""
    default = LOG_DIR / f"{tool}.log"
    parser.add_argument("--verbose", action="store_true",
                        help="show NeMo's, Lightning's and transformers' log lines and warnings (on standard error) "
                             "instead of writing them to --log")
    parser.add_argument("--log", type=Path, default=default,
                        help=f"where those lines go, this run's only (default: {default.relative_to(REPO_ROOT)} in the "
                             "repository)")


def log_target(args: argparse.Namespace) -> Path | None:
    """The file for :func:`library_output_to`: ``--log``, or None with ``--verbose``."""
    return None if args.verbose else args.log


def save_png_atomic(fig, path: str | os.PathLike, dpi: int = 120) -> None:
    """Lay out a matplotlib figure, write it as PNG through a temporary file, and close it."""
    # pyplot takes ~3.5 s to import: only the calls that use it pay for it
    import matplotlib.pyplot as plt

    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=dpi)
    plt.close(fig)
