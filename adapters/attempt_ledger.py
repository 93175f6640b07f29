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

(``kernel.turn.policy.replay_decision`` turns the state and the tool's policy into a decision.)

The port (``AttemptLedger``) is five calls; every implementation makes ``create`` a
create-if-absent write and ``take_over`` / ``complete`` conditional, so two executions of one
activity (Azure may deliver an activity twice at once) never both own a record:

* ``create(key, owner, lease_s) -> bool``: True if this call created the record;
* ``read(key) -> AttemptRecord | None``;
* ``renew(key, owner, lease_s) -> bool``: extend the lease; False if ``owner`` no longer holds it;
* ``take_over(key, owner, lease_s, expected_owner) -> bool``: a recovery claims an expired record
  whose owner is still ``expected_owner``; the record counts one more run;
* ``complete(key, result, owner=None) -> result``: the first result written wins and is
  returned; with ``owner``, only while ``owner`` still holds the record: an execution whose
  expired record was taken over gets ``LeaseLost`` and its result is not written (the new owner's
  is the one that counts).

``FileAttemptLedger`` stores one JSON file per record: exclusive create (``O_CREAT | O_EXCL``)
then fsync of the file and its directory; updates write a temporary file and rename it over
the record, under an advisory lock so the conditional updates are atomic between processes.
The directory is ``AGENT_LEDGER_DIR`` (default ``.durable/ledger``). It is shared only by the
processes of one machine.

``BlobAttemptLedger`` stores one JSON blob per record (the same JSON as the file) in a container
that every instance of a Function app sees: create is a put with ``If-None-Match: *``, every
update a read followed by a put with ``If-Match: <etag>`` (a conflict means someone else wrote
first: read again and decide again). Each write also stores a token of its own in the blob's
metadata, so after a transient failure - when the write may or may not have been applied - a
re-read tells which: the token is ours (applied, done) or it is not (decide again on what is
there). Lease times are the writers' wall clocks: instances must agree on the time to well
within a lease (NTP does that on Azure).

``default_ledger()`` picks the implementation from the app settings
(``adapters.app_state.state_store_kind``): blobs in ``AGENT_LEDGER_CONTAINER`` (default
``agent-ledger``) on ``AzureWebJobsStorage``, or files in ``AGENT_LEDGER_DIR``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Protocol

from adapters import app_state
from kernel.turn.policy import AttemptState

Clock = Callable[[], float]


class LeaseLost(Exception):
    """``complete(..., owner)`` by an execution that no longer holds the record."""


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

    def complete(self, key: str, result: Any, owner: str | None = None) -> Any: ...

    def now(self) -> float: ...


# --- the decisions, shared by every implementation (pure: record + now -> new record) -------


def _renewed(
    record: AttemptRecord | None, owner: str, lease_s: float, now: float
) -> AttemptRecord | None:
    if record is None or record.owner != owner or record.completed:
        return None
    return replace(record, lease_expires_at=now + lease_s, heartbeat_at=now)


def _taken_over(
    record: AttemptRecord | None, owner: str, lease_s: float, expected_owner: str, now: float
) -> AttemptRecord | None:
    if record is None or record.owner != expected_owner or record.state(now) != "expired":
        return None
    return replace(
        record, owner=owner, lease_expires_at=now + lease_s, heartbeat_at=now, runs=record.runs + 1
    )


def _completed(
    key: str, record: AttemptRecord | None, result: Any, owner: str | None
) -> AttemptRecord | None:
    """The completed record, or None when ``record`` already holds the result that wins."""
    if record is None:
        raise KeyError(f"no attempt record {key!r}")
    if record.completed:
        return None
    if owner is not None and record.owner != owner:
        raise LeaseLost(f"attempt {key!r} is now owned by {record.owner!r}, not {owner!r}")
    return replace(record, result=result, completed=True)


# --- files ------------------------------------------------------------------------------------


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
        return self._update(key, lambda record: _renewed(record, owner, lease_s, self._clock()))

    def take_over(self, key: str, owner: str, lease_s: float, expected_owner: str) -> bool:
        return self._update(
            key, lambda record: _taken_over(record, owner, lease_s, expected_owner, self._clock())
        )

    def complete(self, key: str, result: Any, owner: str | None = None) -> Any:
        with self._locked(key):
            record = self._read(key)
            new = _completed(key, record, result, owner)
            if new is None:
                assert record is not None
                return record.result
            self._write(new)
            return result

    def _update(
        self, key: str, change: Callable[[AttemptRecord | None], AttemptRecord | None]
    ) -> bool:
        if not self.root.exists():
            return False
        with self._locked(key):
            new = change(self._read(key))
            if new is None:
                return False
            self._write(new)
            return True

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


# --- Azure Blob -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Stored:
    record: AttemptRecord
    etag: str
    token: str | None


class BlobAttemptLedger:
    """One JSON blob per record in a container (a ``ContainerClient``); see the module docstring."""

    def __init__(self, container: Any, clock: Clock = time.time):
        self._container = container
        self._clock = clock

    def now(self) -> float:
        return self._clock()

    def create(self, key: str, owner: str, lease_s: float) -> bool:
        now = self._clock()
        body = json.dumps(asdict(AttemptRecord(key, owner, now, now + lease_s, now)))
        return app_state.create_once(self._blob(key), body)

    def read(self, key: str) -> AttemptRecord | None:
        stored = self._fetch(key)
        return stored.record if stored else None

    def renew(self, key: str, owner: str, lease_s: float) -> bool:
        return self._update(key, lambda record: _renewed(record, owner, lease_s, self._clock()))[0]

    def take_over(self, key: str, owner: str, lease_s: float, expected_owner: str) -> bool:
        return self._update(
            key, lambda record: _taken_over(record, owner, lease_s, expected_owner, self._clock())
        )[0]

    def complete(self, key: str, result: Any, owner: str | None = None) -> Any:
        _, record = self._update(key, lambda record: _completed(key, record, result, owner))
        assert record is not None
        return record.result

    def _update(
        self, key: str, change: Callable[[AttemptRecord | None], AttemptRecord | None]
    ) -> tuple[bool, AttemptRecord | None]:
        """Apply ``change`` with an ETag-conditional put: ``(written, record now)``."""
        from azure.core import MatchConditions
        from azure.core.exceptions import ResourceModifiedError, ResourceNotFoundError

        token = uuid.uuid4().hex
        unsure = False  # a put of ours may have been applied although it reported a failure
        blob = self._blob(key)
        for attempt in range(app_state.RETRY_ATTEMPTS):
            stored = self._fetch(key)
            if unsure and stored is not None and stored.token == token:
                return True, stored.record
            new = change(stored.record if stored else None)
            if new is None or stored is None:
                return False, stored.record if stored else None
            try:
                blob.upload_blob(
                    json.dumps(asdict(new)),
                    overwrite=True,
                    metadata={"write": token},
                    etag=stored.etag,
                    match_condition=MatchConditions.IfNotModified,
                )
                return True, new
            except (ResourceModifiedError, ResourceNotFoundError):
                continue  # someone else wrote first (or ours did): read again, decide again
            except Exception as exc:
                if not app_state.is_transient(exc):
                    raise
                unsure = True
                app_state.backoff(attempt)
        raise TimeoutError(f"attempt record {key!r}: no conditional write got through")

    def _fetch(self, key: str) -> _Stored | None:
        from azure.core.exceptions import ResourceNotFoundError

        def download() -> _Stored | None:
            try:
                downloader = self._blob(key).download_blob()
                raw = downloader.readall()
            except ResourceNotFoundError:
                return None
            props = downloader.properties
            record = AttemptRecord(**json.loads(raw))
            return _Stored(record, props.etag, (props.metadata or {}).get("write"))

        return app_state.retry_transient(download)

    def _blob(self, key: str) -> Any:
        return self._container.get_blob_client(urllib.parse.quote(key, safe="") + ".json")


def default_ledger() -> AttemptLedger:
    """The ledger the app settings choose (see the module docstring)."""
    if app_state.state_store_kind() == "blob":
        name = app_state.container_name(
            "AGENT_LEDGER_CONTAINER", app_state.LEDGER_CONTAINER_DEFAULT
        )
        return BlobAttemptLedger(app_state.container_client(app_state.storage_connection(), name))
    return FileAttemptLedger(os.environ.get("AGENT_LEDGER_DIR") or ".durable/ledger")
