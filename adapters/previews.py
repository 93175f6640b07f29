"""The preview store and its coalescing writer: live, lossy progress kept beside the durable state.

Previews (``kernel.session.previews``) never enter an orchestration history or the session entity. They
are kept here, one record per ``(session, task)``, overwritten in place:

* ``PreviewStore`` (the port): ``put(record)`` overwrites the record of its session and task;
  ``get(session_id, task)`` reads one (None when absent or unreadable); ``list(session_id)``
  reads every record of a session; ``delete(session_id, task)`` removes one (absent is fine);
  ``clear(session_id)`` removes a session's records (a deleted session).
  Nothing here is durable in the ledger's sense: a write may be lost with its process, a
  damaged record reads as absent, and the writes are not fsynced - recovery never reads them.
* ``FilePreviewStore``: a JSON file per record under ``AGENT_PREVIEW_DIR`` (default
  ``.durable/previews``), ``<session>/<sha256(task)[:32]>.json``, written to a temporary file
  and renamed over the old one, so a reader sees the old record or the new one.
* ``BlobPreviewStore``: a blob per record, ``<session>/<sha256(task)[:32]>.json``, in
  ``AGENT_PREVIEW_CONTAINER`` (default ``agent-previews``) on ``AzureWebJobsStorage``; a put
  overwrites, ``list`` lists the session's prefix.
* ``default_store()`` picks one as the ledger and the content store do
  (``adapters.app_state.state_store_kind``).

``PreviewWriter`` is the writing shell of one key: ``update(text)`` from the event loop that
produces the text (a model stream, a tool), ``aclose()`` when the work ends. It asks
``kernel.session.previews.Coalescer`` when to write and writes in a background task, so the producer
never waits for the store; at most one write is in flight, a failed write is logged and
dropped, and ``aclose`` waits for a write in flight, so a cleared preview is not rewritten.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from adapters import app_state
from kernel.session import previews as rules

PREVIEW_CONTAINER_DEFAULT = "agent-previews"
log = logging.getLogger(__name__)


class PreviewStore(Protocol):
    def put(self, record: dict[str, Any]) -> None: ...

    def get(self, session_id: str, task: str) -> dict[str, Any] | None: ...

    def list(self, session_id: str) -> list[dict[str, Any]]: ...

    def delete(self, session_id: str, task: str) -> None: ...

    def clear(self, session_id: str) -> None: ...


def _name(task: str) -> str:
    # Task ids hold ':' and may be long; a digest is a safe file and blob name of fixed length.
    return hashlib.sha256(task.encode()).hexdigest()[:32] + ".json"


def _decode(data: bytes) -> dict[str, Any] | None:
    try:
        return rules.valid_record(json.loads(data))
    except ValueError:
        return None


def _encode(record: dict[str, Any]) -> bytes:
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode()


class FilePreviewStore:
    def __init__(self, root: Path | None = None):
        self.root = Path(root or os.environ.get("AGENT_PREVIEW_DIR") or ".durable/previews")

    def _path(self, session_id: str, task: str) -> Path:
        return self.root / session_id / _name(task)

    def put(self, record: dict[str, Any]) -> None:
        path = self._path(record["session_id"], record["task"])
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.{id(record)}.tmp")
        tmp.write_bytes(_encode(record))
        tmp.replace(path)

    def get(self, session_id: str, task: str) -> dict[str, Any] | None:
        try:
            return _decode(self._path(session_id, task).read_bytes())
        except OSError:
            return None

    def list(self, session_id: str) -> list[dict[str, Any]]:
        folder = self.root / session_id
        found = []
        for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
            with contextlib.suppress(OSError):
                record = _decode(path.read_bytes())
                if record is not None:
                    found.append(record)
        return found

    def delete(self, session_id: str, task: str) -> None:
        self._path(session_id, task).unlink(missing_ok=True)

    def clear(self, session_id: str) -> None:
        folder = self.root / session_id
        for path in folder.glob("*") if folder.is_dir() else []:
            path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            folder.rmdir()


class BlobPreviewStore:
    """A blob per record in a container (a ``ContainerClient``); see the module docstring."""

    def __init__(self, container: Any):
        self._container = container

    def put(self, record: dict[str, Any]) -> None:
        blob = self._container.get_blob_client(f"{record['session_id']}/{_name(record['task'])}")
        data = _encode(record)
        # An overwrite repeated after a lost answer writes the same bytes again: safe to retry.
        app_state.retry_transient(lambda: blob.upload_blob(data, overwrite=True))

    def get(self, session_id: str, task: str) -> dict[str, Any] | None:
        from azure.core.exceptions import ResourceNotFoundError

        blob = self._container.get_blob_client(f"{session_id}/{_name(task)}")
        try:
            return _decode(bytes(app_state.retry_transient(lambda: blob.download_blob().readall())))
        except ResourceNotFoundError:
            return None

    def list(self, session_id: str) -> list[dict[str, Any]]:
        from azure.core.exceptions import ResourceNotFoundError

        found = []
        names = app_state.retry_transient(
            lambda: [b.name for b in self._container.list_blobs(name_starts_with=f"{session_id}/")]
        )
        for name in names:
            blob = self._container.get_blob_client(name)

            def download(blob: Any = blob) -> bytes:
                return bytes(blob.download_blob().readall())

            try:  # deleted between the listing and the read: superseded anyway
                data = app_state.retry_transient(download)
            except ResourceNotFoundError:
                continue
            record = _decode(data)
            if record is not None:
                found.append(record)
        return found

    def delete(self, session_id: str, task: str) -> None:
        from azure.core.exceptions import ResourceNotFoundError

        blob = self._container.get_blob_client(f"{session_id}/{_name(task)}")
        with contextlib.suppress(ResourceNotFoundError):
            app_state.retry_transient(blob.delete_blob)

    def clear(self, session_id: str) -> None:
        from azure.core.exceptions import ResourceNotFoundError

        names = app_state.retry_transient(
            lambda: [b.name for b in self._container.list_blobs(name_starts_with=f"{session_id}/")]
        )
        for name in names:
            blob = self._container.get_blob_client(name)
            with contextlib.suppress(ResourceNotFoundError):
                app_state.retry_transient(blob.delete_blob)


def default_store() -> PreviewStore:
    """The store the app settings choose (see the module docstring)."""
    if app_state.state_store_kind() == "blob":
        name = app_state.container_name("AGENT_PREVIEW_CONTAINER", PREVIEW_CONTAINER_DEFAULT)
        return BlobPreviewStore(app_state.container_client(app_state.storage_connection(), name))
    return FilePreviewStore()


def open_store() -> PreviewStore | None:
    """``default_store()``, or None when it cannot be opened: a model call or a tool goes on
    without previews rather than fail for them."""
    try:
        return default_store()
    except Exception as exc:  # noqa: BLE001 - previews are optional by contract
        log.warning("previews are off for this call: %s", exc)
        return None


def settings() -> rules.PreviewSettings:
    """The preview settings of this app (off when a setting is unusable: previews are optional,
    so a bad value is logged and turns them off instead of failing model calls)."""
    try:
        return rules.PreviewSettings.from_settings(os.environ)
    except rules.PreviewSettingsError as exc:
        log.warning("previews are off: %s", exc)
        return rules.PreviewSettings()


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class PreviewWriter:
    """Coalesced, background writes of one preview key; see the module docstring."""

    def __init__(
        self,
        store: PreviewStore,
        *,
        session_id: str,
        task: str,
        kind: rules.PreviewKind,
        submission_id: str,
        round_no: int | None = None,
        interval_s: float = rules.DEFAULT_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._store = store
        self.session_id, self.task, self.kind = session_id, task, kind
        self.submission_id, self.round_no = submission_id, round_no
        self._coalescer = rules.Coalescer(interval_s)
        self._clock = clock
        self._seq: int | None = None  # read from the store before the first write
        self._wake = asyncio.Event()
        self._closed = False
        self._task: asyncio.Task[None] | None = None

    @property
    def writes(self) -> int:
        return self._coalescer.writes

    def update(self, text: str) -> None:
        """The newest text; written now or at the end of the current interval."""
        if self._closed:
            return
        self._coalescer.offer(text)
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())
        self._wake.set()

    async def aclose(self, clear: bool = False) -> None:
        """Stop writing (what is pending is dropped); ``clear`` deletes the preview too."""
        self._closed = True
        self._wake.set()
        if self._task is not None:
            await self._task
        if clear:
            await self._io(self._store.delete, self.session_id, self.task)

    async def _run(self) -> None:
        while not self._closed:
            wait = self._coalescer.due_in(self._clock())
            if wait is None or wait > 0:
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), wait)
                continue
            text = self._coalescer.take(self._clock())
            if text is not None:
                await self._write(text)

    async def _write(self, text: str) -> None:
        if self._seq is None:
            # A rerun after a crash continues after the seq its predecessor reached.
            found = await self._io(self._store.get, self.session_id, self.task)
            self._seq = int(found["seq"]) if found else 0
        self._seq += 1
        record = rules.record(
            session_id=self.session_id,
            task=self.task,
            kind=self.kind,
            submission_id=self.submission_id,
            seq=self._seq,
            text=text,
            at=_now(),
            round_no=self.round_no,
        )
        await self._io(self._store.put, record)

    async def _io(self, call: Callable[..., Any], *args: Any) -> Any:
        try:
            return await asyncio.to_thread(call, *args)
        except Exception as exc:  # noqa: BLE001 - a lost preview is allowed; the work goes on
            log.warning("preview write dropped (%s %s): %s", self.kind, self.task, exc)
            return None
