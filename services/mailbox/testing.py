"""Start and stop a real mailbox process, for this package's tests and for end-to-end suites.

`start_mailbox(db_path)` runs `python -m services.mailbox serve --port 0` as a child process
(same interpreter, repository root as working directory), waits a bounded time for its
"listening" line and returns `(process, base_url)`. The caller owns the process and ends it
with `stop_mailbox` (SIGTERM, then SIGKILL if it does not exit in time) or kills it on purpose.
"""

from __future__ import annotations

import os
import selectors
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
READY_PREFIX = "mailbox listening on "


def start_mailbox(
    db_path: str | Path, *, host: str = "127.0.0.1", ready_timeout: float = 10.0
) -> tuple[subprocess.Popen[bytes], str]:
    command = [
        sys.executable,
        "-m",
        "services.mailbox",
        "serve",
        "--db",
        str(Path(db_path).resolve()),
        "--host",
        host,
        "--port",
        "0",
    ]
    process = subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.PIPE, bufsize=0)
    try:
        line = _read_first_line(process, time.monotonic() + ready_timeout)
    except BaseException:
        process.kill()
        process.wait()
        _close_stdout(process)
        raise
    if not line.startswith(READY_PREFIX):
        stop_mailbox(process)
        raise RuntimeError(f"unexpected first line from the mailbox: {line!r}")
    return process, line.removeprefix(READY_PREFIX)


def stop_mailbox(process: subprocess.Popen[bytes], *, timeout: float = 5.0) -> int:
    """End the process (SIGTERM, then SIGKILL after `timeout`) and return its exit status."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    _close_stdout(process)
    return process.returncode


def _read_first_line(process: subprocess.Popen[bytes], deadline: float) -> str:
    # raw reads with a deadline: a buffered readline() would block forever on a hung child
    assert process.stdout is not None
    fd = process.stdout.fileno()
    received = b""
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        while b"\n" not in received:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not selector.select(remaining):
                raise TimeoutError("the mailbox did not report its address in time")
            chunk = os.read(fd, 4096)
            if not chunk:
                raise RuntimeError(f"the mailbox exited with status {process.wait()} at start")
            received += chunk
    return received.split(b"\n", 1)[0].decode("utf-8").strip()


def _close_stdout(process: subprocess.Popen[bytes]) -> None:
    if process.stdout is not None:
        process.stdout.close()
