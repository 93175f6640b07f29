"""What an MCP server costs a turn: history events and bytes, the catalogue, wall time.

Two fresh hosts on SQLite run the offline planner: one without ``AGENT_MCP_SERVERS``, one with
the reference git server (``mcp-server-git`` over stdio, on a repository this script makes).
Each runs ``calculate 2+3``; the second also ``call mcp__git__git_log with {...}``. For every
turn it prints the orchestrations' history events and bytes (the store's ``history`` table),
the stored catalogue's size, and the turn's wall time (noisy on a shared machine).

Usage: ``python bench/mcp_turn.py``
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.kernel_client import kernel_env, submit, wait_final
from durable_host.testing import HostProcess

GIT = str(Path(sys.executable).parent / "mcp-server-git")


def history(db: Path, session: str, sub: str) -> tuple[int, int]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT event FROM history WHERE instance_id LIKE ? OR instance_id LIKE ?",
            (f"{session}:turn:{sub}%", f"{sub}:%"),
        ).fetchall()
    return len(rows), sum(len(row[0]) for row in rows)


def turn(host: HostProcess, db: Path, session: str, text: str) -> dict[str, object]:
    started = time.monotonic()
    sub = submit(host, session, text)
    final = wait_final(host, session, sub, timeout=300)
    events, size = history(db, session, sub)
    return {
        "turn": text[:40],
        "status": final["status"],
        "events": events,
        "history bytes": size,
        "seconds": round(time.monotonic() - started, 1),
    }


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        repo = tmp / "repo"
        subprocess.run(["git", "init", "-q", str(repo)], check=True)
        subprocess.run(
            ["git", "-C", str(repo), "-c", "user.name=b", "-c", "user.email=b@example.com",
             "commit", "-q", "--allow-empty", "-m", "init"],
            check=True,
        )  # fmt: skip
        servers = {"mcpServers": {"git": {"command": GIT, "args": ["--repository", str(repo)]}}}
        rows = []
        for name, extra in (("plain", {}), ("git", {"AGENT_MCP_SERVERS": json.dumps(servers)})):
            db = tmp / f"{name}.db"
            host = HostProcess(ROOT, f"sqlite:{db}", env=kernel_env(tmp / name, extra)).start()
            try:
                rows.append({"host": name, **turn(host, db, f"{name}-1", "calculate 2+3")})
                if name == "git":
                    text = f'call mcp__git__git_log with {{"repo_path": "{repo}", "max_count": 1}}'
                    rows.append({"host": name, **turn(host, db, f"{name}-2", text)})
            finally:
                host.kill()
        catalogues = [p.stat().st_size for p in (tmp / "git").rglob("*") if p.is_file()]
        print(json.dumps(rows, indent=1))
        print(
            f"content stored by the git host (bytes, largest first): {sorted(catalogues)[::-1][:3]}"
        )


if __name__ == "__main__":
    main()
