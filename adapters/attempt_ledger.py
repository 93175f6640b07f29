"""Attempt ledger: one record per attempt of a side effect, created with a create-if-absent write.

It closes the "done but not saved" window of at-least-once activities. Before a tool runs, its
activity creates the record for ``{submission}:{round}:{call}:{attempt}``; only the creator
runs the tool. A running tool renews its lease (heartbeat); when it is done, the result is
written into the record. Whoever later finds the record knows what happened:

==========  ===================================  ==============================================
state       record                               meaning
==========  ===================================  ==============================================
absent      none                                 never started: run it
completed   has a result                         done: reuse the result, never run it again
leased      no result, lease not yet expired     another execution is running it: wait
expired     no result, lease expired             it started and died: the outcome is unknown
==========  ===================================  ==============================================

(``kernel.turn_policy.replay_decision`` turns the state and the tool's policy into a decision.)

The port (``AttemptLedger``) is five calls; every implementation makes ``create`` a
create-if-absent write and ``take_over`` / ``complete`` conditional, so two executions of one
activity (Azure may deliver an activity twice at once) never both own a record:

* ``create(key, owner, lease_s) -> bool``: True if this call created the record;
* ``read(key) -> AttemptRecord | None``;
* ``renew(key, owner, lease_s) -> bool``: extend the lease; False if ``owner`` no longer holds it;
* ``take_over(key, owner, lease_s, expected_owner) -> bool``: a recovery claims an expired record
  whose owner is still ``expected_owner``; the record counts one more run;
* ``complete(key, result) -> result``: the first result written wins and is returned.

``FileAttemptLedger`` stores one JSON file per record: exclusive create (``O_CREAT | O_EXCL``)
then fsync of the file and its directory; updates write a temporary file and rename it over
the record, under an advisory lock so the conditional updates are atomic between processes.
The directory is ``AGENT_LEDGER_DIR`` (default ``.durable/ledger``). An Azure Blob
implementation (``If-None-Match: *`` on create, ETag-conditional updates) fits the same port.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from kernel.turn_policy import AttemptState

Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class AttemptRecord:
    key: str
    owner: str
    created_at: float
    lease_expires_at: float
    heartbeat_at: float
    runs: int = 1
    result: Any = None
    completed: bool = False

    def state(self, now: float) -> AttemptState:
        if self.completed:
            return "completed"
        return "leased" if now < self.lease_expires_at else "expired"


def attempt_state(record: AttemptRecord | None, now: float) -> AttemptState:
    return "absent" if record is None else record.state(now)


class AttemptLedger(Protocol):
    def create(self, key: str, owner: str, lease_s: float) -> bool: ...

    def read(self, key: str) -> AttemptRecord | None: ...

    def renew(self, key: str, owner: str, lease_s: float) -> bool: ...

    def take_over(self, key: str, owner: str, lease_s: float, expected_owner: str) -> bool: ...

    def complete(self, key: str, result: Any) -> Any: ...

    def now(self) -> float: ...


class FileAttemptLedger:
    """One JSON file per record in ``root``; see the module docstring."""

    def __init__(self, root: Path | str, clock: Clock = time.time):
        self.root = Path(root)
        self._clock = clock

    def now(self) -> float:
        return self._clock()

    def create(self, key: str, owner: str, lease_s: float) -> bool:
        now = self._clock()
        record = AttemptRecord(key, owner, now, now + lease_s, now)
        self.root.mkdir(parents=True, exist_ok=True)
        with self._locked(key):  # readers never see a created but still empty file
            try:
                fd = os.open(self._path(key), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                return False
            with os.fdopen(fd, "w", encoding="utf-8") as file:
                json.dump(asdict(record), file)
                file.flush()
                os.fsync(file.fileno())
            self._sync_dir()
        return True

    def read(self, key: str) -> AttemptRecord | None:
        if not self.root.exists():
            return None
        with self._locked(key):
            return self._read(key)

    def _read(self, key: str) -> AttemptRecord | None:
        try:
            raw = self._path(key).read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        return AttemptRecord(**json.loads(raw))

    def renew(self, key: str, owner: str, lease_s: float) -> bool:
        with self._locked(key):
            record = self._read(key)
            if record is None or record.owner != owner or record.completed:
                return False
            now = self._clock()
            self._write(replace(record, lease_expires_at=now + lease_s, heartbeat_at=now))
            return True

    def take_over(self, key: str, owner: str, lease_s: float, expected_owner: str) -> bool:
        with self._locked(key):
            record = self._read(key)
            now = self._clock()
            if record is None or record.owner != expected_owner or record.state(now) != "expired":
                return False
            self._write(
                replace(
                    record,
                    owner=owner,
                    lease_expires_at=now + lease_s,
                    heartbeat_at=now,
                    runs=record.runs + 1,
                )
            )
            return True

    def complete(self, key: str, result: Any) -> Any:
        with self._locked(key):
            record = self._read(key)
            if record is None:
                raise KeyError(f"no attempt record {key!r}")
            if record.completed:
                return record.result
            self._write(replace(record, result=result, completed=True))
            return result

    def _path(self, key: str) -> Path:
        # Keys hold ':'; quoting keeps every key a distinct, portable file name.
        return self.root / (urllib.parse.quote(key, safe="") + ".json")

    @contextlib.contextmanager
    def _locked(self, key: str) -> Iterator[None]:
        # The record is replaced by rename, so the lock lives on a sidecar file.
        lock_path = self._path(key).with_suffix(".lock")
        with open(lock_path, "a") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)

    def _write(self, record: AttemptRecord) -> None:
        path = self._path(record.key)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        with open(tmp, "w", encoding="utf-8") as file:
            json.dump(asdict(record), file)
            file.flush()
            os.fsync(file.fileno())
        os.replace(tmp, path)
        self._sync_dir()

    def _sync_dir(self) -> None:
        fd = os.open(self.root, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def default_ledger() -> FileAttemptLedger:
    return FileAttemptLedger(os.environ.get("AGENT_LEDGER_DIR") or ".durable/ledger")
