"""What keeps one SQLite task hub file in the hands of one host, and tells storage failures
apart from everything else.

* ``FileOwnership`` - the one-host-per-file lock is an exclusive ``flock`` on the database
  file itself, so it follows the file's identity (device + inode), not the path string: a
  symlink, a hard link or another spelling of the path reaches the same lock, and there is
  no side file whose deletion would let a second host in. (``flock`` and SQLite's own POSIX
  record locks do not interact on Linux, and closing SQLite's descriptors does not drop a
  ``flock``.) ``check`` compares the file the path names now with the locked one: a file
  removed or replaced under a running host is noticed at the next write (and at the next
  read at most a second later) instead of absorbing writes that vanish at restart.
* The **epoch**: ``claim`` raises the ``owner`` row's epoch when the host opens the file, and
  every write transaction checks it (``fence``), so a host that lost the file to another
  one - should a lock ever fail to exclude it, e.g. on a network file system - has its
  commit refused before anything is written. The same statement stamps the row with the
  transaction's nonce, so a transaction whose COMMIT reported an error can be checked
  (``applied``): it took effect exactly when the row carries its nonce.
* ``translate`` turns a ``sqlite3`` error into the port's errors: corruption
  (``SQLITE_CORRUPT``, ``SQLITE_NOTADB``) is a ``StoreCorruptError`` (the store is lost);
  any other operational failure (full disk, I/O error, busy) a ``StoreFailedError`` that the
  engine retries without counting it as an attempt. Errors of the SQL itself (integrity,
  programming) stay as they are: they are bugs or bad payloads, not storage failures.
* ``StoreFaults`` - the test faults of ``DURABLE_HOST_STORE_FAULTS`` and
  ``DURABLE_HOST_STORE_FULL`` (``faults``): SQLite's own errors, injected before or after a
  transaction applies, and a full disk (every write fails) while a switch file exists.
"""

from __future__ import annotations

import fcntl
import os
import random
import socket
import sqlite3
from pathlib import Path

from durable_host.ops import faults
from durable_host.store.base import StoreError, StoreLockedError, StoreLostError

OWNER_SCHEMA = """
CREATE TABLE IF NOT EXISTS owner (
    one INTEGER PRIMARY KEY CHECK (one = 1),
    epoch INTEGER NOT NULL,
    holder TEXT NOT NULL,
    tx INTEGER NOT NULL DEFAULT 0
);
"""
_CORRUPT = ("SQLITE_CORRUPT", "SQLITE_NOTADB")
_CORRUPT_TEXT = ("malformed", "not a database", "corrupt")


class StoreFailedError(StoreError):
    """The SQLite file could not be read or written just now (full disk, I/O error)."""


class StoreCorruptError(StoreLostError):
    """The SQLite file is damaged: the host must stop, and must not start on it."""


def translate(exc: sqlite3.Error, path: Path) -> Exception:
    """The port's error for a ``sqlite3`` error; the error itself if it is not the storage's."""
    name = getattr(exc, "sqlite_errorname", None) or ""
    text = str(exc)
    if name.startswith(_CORRUPT) or any(t in text for t in _CORRUPT_TEXT):
        return StoreCorruptError(
            f"the task hub database {path} is corrupt ({name or 'error'}: {text});"
            " restore it from a backup or move it away to start with an empty task hub"
        )
    if isinstance(exc, sqlite3.OperationalError):
        return StoreFailedError(f"the task hub database {path} failed: {name or 'error'}: {text}")
    return exc


class FileOwnership:
    """The exclusive lock on the database file, its identity, and the epoch fence."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.epoch = 0
        self._fd: int | None = None
        self._identity: tuple[int, int] | None = None
        # A nonce tells this host's commits apart, it guards no secret: a generator seeded
        # once from the OS, not a call into the kernel for every commit.
        self._nonces = random.Random()

    def lock(self) -> None:
        """Lock the file (creating it if absent); ``StoreLockedError`` if another host has it."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StoreLockedError(
                f"Another durable host is already using the task hub database {self.path}"
                " (or another name of the same file); the embedded SQLite store allows one"
                " host process per file"
            ) from None
        stat = os.fstat(fd)
        self._fd, self._identity = fd, (stat.st_dev, stat.st_ino)

    def unlock(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def check(self) -> None:
        """``StoreLostError`` unless the path still names the file this host locked."""
        try:
            stat = os.stat(self.path)
        except OSError as exc:
            raise StoreLostError(
                f"the task hub database {self.path} was removed while this host used it"
                f" ({exc.strerror}); work accepted since then is not stored"
            ) from None
        if (stat.st_dev, stat.st_ino) != self._identity:
            raise StoreLostError(
                f"the task hub database {self.path} was replaced by another file while this"
                " host used it"
            )

    def claim(self, db: sqlite3.Connection) -> None:
        """Become the file's owner: one epoch more than the last owner's."""
        holder = f"{socket.gethostname()}:{os.getpid()}"
        db.execute("BEGIN IMMEDIATE")
        try:
            db.execute(
                "INSERT INTO owner (one, epoch, holder) VALUES (1, 1, ?) ON CONFLICT(one)"
                " DO UPDATE SET epoch=epoch+1, holder=excluded.holder",
                (holder,),
            )
            self.epoch = int(db.execute("SELECT epoch FROM owner").fetchone()[0])
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise

    def fence(self, db: sqlite3.Connection) -> int:
        """Inside a write transaction: stamp it with a fresh nonce (returned), or
        ``StoreLostError`` if another host owns the file now."""
        nonce = self._nonces.getrandbits(62)
        stamped = db.execute("UPDATE owner SET tx=? WHERE epoch=?", (nonce, self.epoch))
        if stamped.rowcount != 1:
            row = db.execute("SELECT holder FROM owner").fetchone()
            holder = row[0] if row else "nobody"
            raise StoreLostError(
                f"another durable host ({holder}) took over the task hub database {self.path};"
                " this host stops writing"
            )
        return nonce

    @staticmethod
    def applied(db: sqlite3.Connection, nonce: int) -> bool:
        """Whether the transaction stamped ``nonce`` is the last one committed."""
        row = db.execute("SELECT tx FROM owner").fetchone()
        return row is not None and int(row[0]) == nonce


class StoreFaults:
    """Injected SQLite failures for tests (see the module docstring); inert when unset."""

    def __init__(self) -> None:
        self.plan = faults.FaultPlan.from_env(faults.STORE_FAULTS)
        switch = os.environ.get(faults.STORE_FULL, "")
        self.full_switch = Path(switch) if switch else None

    def before(self, operation: str) -> None:
        """Inside a write transaction, before its COMMIT."""
        # A full disk fails every write: each one appends to the write-ahead log.
        if self.full_switch is not None and self.full_switch.exists():
            raise _disk_full()
        if self.plan:
            self.plan.fail(f"{operation}.before", _disk_full())

    def after(self, operation: str) -> None:
        """After a COMMIT applied."""
        if self.plan:
            self.plan.fail(f"{operation}.after", _disk_full())


def _disk_full() -> sqlite3.OperationalError:
    return sqlite3.OperationalError("database or disk is full")
