"""Support for the MCP tests: real MCP servers from PyPI, their configuration, a git repository
whose commits count a tool's effects, and a Streamable HTTP server the tests start.

The stdio servers are the reference servers, pinned in ``requirements-dev.txt``
(``mcp-server-time``, ``mcp-server-git``), started by the kernel from the virtual
environment's ``bin``. ``HttpServer`` runs ``tests/app/mcp_http_server.py`` (the official SDK's
``MCPServer`` over Streamable HTTP) as its own process on a free port: it checks a bearer
token, counts the calls of its non-idempotent tool in a file, can be told to hold a call (a
file appears when it arrives), and can change its tool list between two starts.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.app.turn_support import entries_of
from tests.harness import ROOT, wait_for

BIN = Path(sys.executable).parent
HERE = Path(__file__).resolve().parent


def stdio(command: str, *args: str, **kernel: Any) -> dict[str, Any]:
    return {"command": str(BIN / command), "args": list(args), **kernel}


def config(**servers: dict[str, Any]) -> str:
    return json.dumps({"mcpServers": servers})


def git_repo(path: Path) -> Path:
    """A repository with one commit (``init``) and one staged file for ``git_commit``."""
    path.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}  # fmt: skip
    subprocess.run(["git", "init", "-q", str(path)], check=True, env=env)
    subprocess.run(
        ["git", "-C", str(path), "commit", "-q", "--allow-empty", "-m", "init"], check=True, env=env
    )
    (path / "notes.txt").write_text("staged for the agent's commit\n")
    subprocess.run(["git", "-C", str(path), "add", "notes.txt"], check=True, env=env)
    return path


def commits(repo: Path) -> list[str]:
    out = subprocess.run(
        ["git", "-C", str(repo), "log", "--format=%s"], check=True, capture_output=True, text=True
    ).stdout
    return out.splitlines()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class HttpServer:
    """``tests/app/mcp_http_server.py`` (or another ``script`` of this folder taking the same
    settings, such as ``mcp_task_server.py``) as a process on 127.0.0.1 (``url`` once
    started)."""

    def __init__(
        self, folder: Path, token: str, variant: str = "v1", script: str = "mcp_http_server.py"
    ) -> None:
        self.script = script
        self.folder = folder
        self.token = token
        self.variant = variant
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.process: subprocess.Popen[bytes] | None = None
        folder.mkdir(parents=True, exist_ok=True)

    def start(self) -> HttpServer:
        env = {
            **os.environ,
            "TEST_MCP_TOKEN": self.token,
            "TEST_MCP_FOLDER": str(self.folder),
            "TEST_MCP_VARIANT": self.variant,
            "PYTHONPATH": str(ROOT),
        }
        log = open(self.folder / "server.log", "ab")  # noqa: SIM115 - the process keeps it
        self.process = subprocess.Popen(
            [sys.executable, str(HERE / self.script), str(self.port)],
            env=env,
            stdout=log,
            stderr=log,
        )
        wait_for(self._listening, 90, "the MCP HTTP server to listen", interval=0.05)
        return self

    def _listening(self) -> bool:
        with socket.socket() as sock:
            return sock.connect_ex(("127.0.0.1", self.port)) == 0

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)

    def calls(self, tool: str) -> int:
        path = self.folder / f"{tool}.calls"
        return len(path.read_text().splitlines()) if path.exists() else 0

    def hold(self, tool: str) -> Path:
        """The next call of ``tool`` waits (for ever) once it has counted itself; the returned
        file appears when it arrived."""
        (self.folder / f"{tool}.hold").touch()
        return self.folder / f"{tool}.arrived"

    def release(self, tool: str) -> None:
        (self.folder / f"{tool}.hold").unlink(missing_ok=True)


def wait_file(path: Path, timeout: float = 60) -> None:
    wait_for(lambda: path.exists(), timeout, f"{path.name} to appear", interval=0.05)


def tool_results(host: Any, session: str) -> list[dict[str, Any]]:
    """The data of the session's tool result messages (``tool_task_id``, ``result``...)."""
    return [e["data"] for e in entries_of(host, session, "message") if e["role"] == "tool"]


def outcomes(host: Any, session: str) -> list[dict[str, Any]]:
    """The data of the session's ``tool_outcome`` entries (``ok``, ``runs``...)."""
    return [e["data"] for e in entries_of(host, session, "tool_outcome")]
