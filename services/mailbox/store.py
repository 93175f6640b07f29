"""Durable store of the mailbox: messages keyed by operation id, and an append-only log.

One SQLite file in WAL mode with `synchronous=FULL`, so a commit survives a power cut, not only
a crash of this process. Every write is one transaction.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from services.mailbox.rules import SendRequest

Outcome = Literal["delivered", "replayed", "conflict"]
LOG_KINDS = ("delivery", "replayed_send", "query", "rejected", "failure", "delayed")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    message_id TEXT NOT NULL UNIQUE,
    operation_id TEXT NOT NULL UNIQUE,
    recipient TEXT NOT NULL,
    subject TEXT NOT NULL,
    body TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    accepted_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS log (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL,
    operation_id TEXT,
    recipient TEXT,
    at TEXT NOT NULL
);
"""
_MESSAGE_COLUMNS = "message_id, operation_id, recipient, subject, body, accepted_at, fingerprint"


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class MailStore:
    """Messages and log in one SQLite file.

    Contract:
    - `accept(request)` decides and records a send in one transaction, durable before it
      returns: "delivered" for the first request with an operation id (message + `delivery`
      log entry); "replayed" for the same id with the same payload (only a `replayed_send`
      entry); "conflict" for the same id with another payload (nothing written). It returns
      the outcome and the stored message.
    - `query(operation_id)` logs a `query` entry and returns the message or None: None is a
      definite "never accepted", because acceptance is committed before any answer.
    - `record(kind, ...)` appends one log entry; the log is ordered by `seq` and never changes.
    - Other reads never write.
    The store is used from one thread (the server's event loop), so a lookup and the insert
    that depends on it are never interleaved with another request.
    """

    def __init__(self, path: str | Path, clock: Callable[[], str] = utc_now) -> None:
        self._clock = clock
        self._db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=True)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(_SCHEMA)

    def close(self) -> None:
        self._db.close()

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        # IMMEDIATE takes the write lock up front, so the read that decides is the read that holds
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield self._db
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        self._db.execute("COMMIT")

    def accept(self, request: SendRequest) -> tuple[Outcome, dict[str, Any]]:
        with self._transaction() as db:
            row = self._row_by_operation(request.operation_id)
            if row is not None and row["fingerprint"] != request.fingerprint:
                return "conflict", _message(row)
            if row is not None:
                self._append(db, "replayed_send", request.operation_id, request.to)
                return "replayed", _message(row)
            message_id = f"msg_{uuid.uuid4().hex}"
            db.execute(
                f"INSERT INTO messages ({_MESSAGE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    message_id,
                    request.operation_id,
                    request.to,
                    request.subject,
                    request.body,
                    self._clock(),
                    request.fingerprint,
                ),
            )
            self._append(db, "delivery", request.operation_id, request.to)
            stored = self._row_by_operation(request.operation_id)
            assert stored is not None  # inserted above, in this transaction
            return "delivered", _message(stored)

    def query(self, operation_id: str) -> dict[str, Any] | None:
        with self._transaction() as db:
            row = self._row_by_operation(operation_id)
            self._append(db, "query", operation_id, row["recipient"] if row else None)
        return _message(row) if row else None

    def record(self, kind: str, operation_id: str | None, to: str | None) -> None:
        if kind not in LOG_KINDS:
            raise ValueError(f"unknown log kind {kind!r}")
        with self._transaction() as db:
            self._append(db, kind, operation_id, to)

    def find_by_operation(self, operation_id: str) -> dict[str, Any] | None:
        row = self._row_by_operation(operation_id)
        return _message(row) if row else None

    def get(self, message_id: str) -> dict[str, Any] | None:
        row = self._db.execute(
            f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE message_id = ?", (message_id,)
        ).fetchone()
        return _message(row) if row else None

    def messages(self) -> list[dict[str, Any]]:
        rows = self._db.execute(f"SELECT {_MESSAGE_COLUMNS} FROM messages ORDER BY seq")
        return [_message(row) for row in rows]

    def log(self) -> list[dict[str, Any]]:
        rows = self._db.execute(
            "SELECT seq, kind, operation_id, recipient, at FROM log ORDER BY seq"
        )
        return [
            {
                "seq": r["seq"],
                "kind": r["kind"],
                "operationId": r["operation_id"],
                "to": r["recipient"],
                "at": r["at"],
            }
            for r in rows
        ]

    def stats(self) -> dict[str, Any]:
        counts = dict.fromkeys(LOG_KINDS, 0)
        counts.update(self._db.execute("SELECT kind, COUNT(*) FROM log GROUP BY kind").fetchall())
        per_recipient = self._db.execute(
            "SELECT recipient, COUNT(*) FROM log WHERE kind = 'delivery' "
            "GROUP BY recipient ORDER BY recipient"
        ).fetchall()
        messages = self._db.execute("SELECT COUNT(*) FROM messages").fetchone()[0]
        return {
            "counts": counts,
            "deliveriesByRecipient": dict(per_recipient),
            "messages": messages,
        }

    def _row_by_operation(self, operation_id: str) -> sqlite3.Row | None:
        row: sqlite3.Row | None = self._db.execute(
            f"SELECT {_MESSAGE_COLUMNS} FROM messages WHERE operation_id = ?", (operation_id,)
        ).fetchone()
        return row

    def _append(self, db: sqlite3.Connection, kind: str, op: str | None, to: str | None) -> None:
        db.execute(
            "INSERT INTO log (kind, operation_id, recipient, at) VALUES (?, ?, ?, ?)",
            (kind, op, to, self._clock()),
        )


def _message(row: sqlite3.Row) -> dict[str, Any]:
    return {
        "messageId": row["message_id"],
        "operationId": row["operation_id"],
        "to": row["recipient"],
        "subject": row["subject"],
        "body": row["body"],
        "acceptedAt": row["accepted_at"],
    }
