"""A private PostgreSQL server for the tests, as ``durable_host.ops.azurite`` is for Azure.

``PostgresServer.start()`` runs Debian's ``initdb`` into a fresh temporary directory (a
password-authenticated superuser, TCP on a free loopback port, its unix socket in that
directory) and ``pg_ctl start``; ``stop()`` stops it and removes the directory. PostgreSQL
refuses to run as root: under root the server runs as the ``postgres`` system user, the
directory is made and owned for it, and the folders above it (the test run's own temporary
folder, 0700) get search permission for other users.

Faults for the tests: ``restart(immediate=True)`` (``pg_ctl restart -m immediate``: a crash
and recovery) and ``terminate_backends()`` (``pg_terminate_backend`` of every other session).
"""

from __future__ import annotations

import glob
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import psycopg

START_TIMEOUT = 60


def find_bindir() -> Path | None:
    """The newest installed server's binaries (Debian: /usr/lib/postgresql/<major>/bin)."""
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"),
        key=lambda p: (
            int(Path(p).parent.parent.name) if Path(p).parent.parent.name.isdigit() else 0
        ),
    )
    if found:
        return Path(found[-1]).parent
    pg_ctl = shutil.which("pg_ctl")
    return Path(pg_ctl).parent if pg_ctl else None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _traversable(folder: Path) -> None:
    """Let other users pass through ``folder`` and its parents (search permission only,
    no listing): the temporary folders of a test run as root are 0700, and the server runs
    as ``postgres`` in a directory below them."""
    for part in (folder, *folder.parents):
        mode = part.stat().st_mode
        if not mode & 0o001:
            part.chmod(mode | 0o001)


class PostgresServer:
    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="durable-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self.port = free_port()
        self.password = secrets.token_urlsafe(16)
        self.user = "durable"
        self._as: list[str] = []
        if os.geteuid() == 0:
            account = pwd.getpwnam("postgres")
            os.chown(self.root, account.pw_uid, account.pw_gid)
            self._as = ["runuser", "-u", "postgres", "--"]
            _traversable(self.root.parent)
        os.chmod(self.root, 0o700)

    @property
    def url(self) -> str:
        return f"postgresql://{self.user}:{self.password}@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str, timeout: float = START_TIMEOUT) -> None:
        subprocess.run(
            [*self._as, *args],
            check=True,
            timeout=timeout,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )

    def start(self) -> PostgresServer:
        pwfile = self.root / "pw"
        pwfile.write_text(self.password + "\n")
        if self._as:
            account = pwd.getpwnam("postgres")
            os.chown(pwfile, account.pw_uid, account.pw_gid)
        self._run(
            str(self.bindir / "initdb"),
            "-D",
            str(self.data),
            "-U",
            self.user,
            "--pwfile",
            str(pwfile),
            "--auth=scram-sha-256",
            "-E",
            "UTF8",
            "--locale=C.UTF-8",
        )
        pwfile.unlink()
        self.pg_ctl("start")
        return self

    def pg_ctl(self, *command: str) -> None:
        options = (
            f"-p {self.port} -c listen_addresses=127.0.0.1"
            f" -c unix_socket_directories={self.root} -c max_connections=200"
        )
        self._run(
            str(self.bindir / "pg_ctl"),
            *command,
            "-D",
            str(self.data),
            "-l",
            str(self.log),
            "-o",
            options,
            "-w",
            "-t",
            str(START_TIMEOUT),
        )

    def restart(self, immediate: bool = True) -> None:
        """``pg_ctl restart -m immediate``: the server crashes and recovers."""
        self.pg_ctl("restart", "-m", "immediate" if immediate else "fast")

    def terminate_backends(self) -> int:
        """``pg_terminate_backend`` of every client session but this one; how many."""
        with psycopg.connect(self.url, autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                " WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'"
            ).fetchone()
        return int(row[0]) if row else 0

    def stop(self) -> None:
        try:
            self._run(
                str(self.bindir / "pg_ctl"), "stop", "-D", str(self.data), "-m", "fast", timeout=60
            )
        except (subprocess.SubprocessError, OSError):
            pass
        shutil.rmtree(self.root, ignore_errors=True)
