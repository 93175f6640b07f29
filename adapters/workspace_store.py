"""Where workspace files and snapshots are kept: content-addressed, shared by every host.

The port (``WorkspaceStore``), kept by both implementations:

* ``put_file(data) -> hash``: stores the bytes under their sha256 (hex) once; storing the same
  bytes again writes nothing (files unchanged between snapshots are never stored twice). The
  write is durable before the hash is handed out.
* ``get_file(hash) -> bytes``: verified against the hash; ``WorkspaceMissing`` when absent or
  damaged (a damaged copy is never returned).
* ``put_snapshot(snapshot) -> id`` / ``get_snapshot(id)``: the snapshot JSON
  (``kernel.workspace.files``) under its id, the same way.
* ``chain(id, limit)``: the snapshot and its ancestors, newest first, at most ``limit``.
* ``prune(head, keep)``: deletes a session's snapshots older than its newest ``keep``.
* ``collect(live, keep, grace_s)``: deletes what no live snapshot chain (``keep`` deep) names
  and is older than ``grace_s`` (so a file stored by a tool that has not committed yet is not
  taken from under it); returns the counts.

``FileWorkspaceStore``: files under ``AGENT_WORKSPACE_STORE_DIR`` (default
``.durable/workspace-store``), written to a temporary file, fsynced and renamed.
``BlobWorkspaceStore``: blobs ``files/<hash>`` and ``snapshots/<id>`` in
``AGENT_WORKSPACE_CONTAINER`` (default ``agent-workspace``), created with ``If-None-Match: *``
and an MD5 the service checks. ``default_store()`` picks one from the app settings, through the
same connection code as the other blob adapters (``adapters.app_state``).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Protocol

from adapters import app_state
from kernel.workspace import files as workspace

WORKSPACE_CONTAINER_DEFAULT = "agent-workspace"


class WorkspaceMissing(KeyError):
    """Nothing (or nothing intact) is stored under that hash or snapshot id."""


class _Objects(Protocol):
    """The few object operations the workspace store needs."""

    def put(self, name: str, data: bytes) -> None: ...

    def get(self, name: str) -> bytes: ...

    def delete(self, name: str) -> None: ...

    def listing(self, prefix: str) -> Iterator[tuple[str, float]]: ...


class _FileObjects:
    def __init__(self, root: Path):
        self.root = root

    def _path(self, name: str) -> Path:
        kind, _, key = name.partition("/")
        return self.root / kind / key[:2] / key

    def put(self, name: str, data: bytes) -> None:
        path = self._path(name)
        if path.exists():
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        with tmp.open("wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        tmp.replace(path)

    def get(self, name: str) -> bytes:
        try:
            return self._path(name).read_bytes()
        except FileNotFoundError as exc:
            raise WorkspaceMissing(name) from exc

    def delete(self, name: str) -> None:
        self._path(name).unlink(missing_ok=True)

    def listing(self, prefix: str) -> Iterator[tuple[str, float]]:
        base = self.root / prefix.rstrip("/")
        if not base.is_dir():
            return
        for path in base.glob("*/*"):
            if path.is_file() and not path.name.endswith(".tmp"):
                yield f"{prefix.rstrip('/')}/{path.name}", path.stat().st_mtime


class _BlobObjects:
    def __init__(self, container: Any):
        self._container = container

    def put(self, name: str, data: bytes) -> None:
        from azure.core.exceptions import ResourceExistsError

        blob = self._container.get_blob_client(name)

        def upload() -> None:
            try:
                blob.upload_blob(data, overwrite=False, validate_content=True)
            except ResourceExistsError:
                pass  # the same bytes are there already: the name is their hash

        app_state.retry_transient(upload)

    def get(self, name: str) -> bytes:
        from azure.core.exceptions import ResourceNotFoundError

        blob = self._container.get_blob_client(name)

        def download() -> bytes:
            try:
                return bytes(blob.download_blob().readall())
            except ResourceNotFoundError as exc:
                raise WorkspaceMissing(name) from exc

        return app_state.retry_transient(download)

    def delete(self, name: str) -> None:
        from azure.core.exceptions import ResourceNotFoundError

        try:
            app_state.retry_transient(lambda: self._container.delete_blob(name))
        except ResourceNotFoundError:
            pass

    def listing(self, prefix: str) -> Iterator[tuple[str, float]]:
        for blob in self._container.list_blobs(name_starts_with=prefix):
            yield blob.name, blob.last_modified.timestamp()


class WorkspaceStore:
    """Files and snapshots over one object store (see the module docstring)."""

    def __init__(self, objects: _Objects):
        self._objects = objects

    def put_file(self, data: bytes) -> str:
        digest = workspace.content_hash(data)
        self._objects.put(f"files/{digest}", data)
        return digest

    def get_file(self, digest: str) -> bytes:
        if not workspace.is_snapshot_id(digest):  # the same 64-hex shape
            raise WorkspaceMissing(digest)
        data = self._objects.get(f"files/{digest}")
        if workspace.content_hash(data) != digest:
            raise WorkspaceMissing(f"the stored content of {digest} does not match its hash")
        return data

    def put_snapshot(self, snapshot: dict[str, Any]) -> str:
        data = workspace.canonical(snapshot)
        snapshot_id = workspace.content_hash(data)
        self._objects.put(f"snapshots/{snapshot_id}", data)
        return snapshot_id

    def get_snapshot(self, snapshot_id: str) -> dict[str, Any]:
        if not workspace.is_snapshot_id(snapshot_id):
            raise WorkspaceMissing(snapshot_id)
        data = self._objects.get(f"snapshots/{snapshot_id}")
        if workspace.content_hash(data) != snapshot_id:
            raise WorkspaceMissing(f"the stored snapshot {snapshot_id} does not match its id")
        snapshot: dict[str, Any] = json.loads(data)
        return snapshot

    def chain(self, snapshot_id: str | None, limit: int = 50) -> list[dict[str, Any]]:
        """``snapshot_id`` and its ancestors, newest first, each with its ``id``; stops at
        ``limit`` or at an ancestor no longer stored (collected)."""
        found: list[dict[str, Any]] = []
        while snapshot_id and len(found) < limit:
            try:
                snapshot = self.get_snapshot(snapshot_id)
            except WorkspaceMissing:
                break
            found.append({**snapshot, "id": snapshot_id})
            snapshot_id = snapshot.get("parent")
        return found

    def prune(self, head: str | None, keep: int) -> int:
        """Delete the ancestors of ``head`` beyond the newest ``keep`` snapshots (a snapshot
        names its session's task, so no other session shares it); the number deleted. Their
        files stay: another snapshot may name the same bytes (``collect`` takes those)."""
        older = self.chain(head, keep + 1)
        if len(older) <= keep:
            return 0
        deleted = 0
        cut = older[-1]["id"]  # the first snapshot past the kept ones, and all its ancestors
        while cut:
            try:
                parent = self.get_snapshot(cut).get("parent")
            except WorkspaceMissing:
                break
            self._objects.delete(f"snapshots/{cut}")
            deleted += 1
            cut = parent
        return deleted

    def collect(self, live: Iterable[str], keep: int = 50, grace_s: float = 3600) -> dict[str, int]:
        """Delete the snapshots and files no live chain (``keep`` deep) names and older than
        ``grace_s``; ``{"snapshots": n, "files": n}`` deleted."""
        snapshots: set[str] = set()
        files: set[str] = set()
        for head in live:
            for snapshot in self.chain(head, keep):
                snapshots.add(snapshot["id"])
                files.update(entry["hash"] for entry in snapshot["files"].values())
        cutoff = time.time() - grace_s
        deleted = {"snapshots": 0, "files": 0}
        for kind, referenced in (("snapshots", snapshots), ("files", files)):
            for name, modified in list(self._objects.listing(f"{kind}/")):
                if name.partition("/")[2] not in referenced and modified < cutoff:
                    self._objects.delete(name)
                    deleted[kind] += 1
        return deleted


def default_store() -> WorkspaceStore:
    """The store the app settings choose (see the module docstring)."""
    if app_state.state_store_kind() == "blob":
        name = app_state.container_name("AGENT_WORKSPACE_CONTAINER", WORKSPACE_CONTAINER_DEFAULT)
        container = app_state.container_client(app_state.storage_connection(), name)
        return WorkspaceStore(_BlobObjects(container))
    root = Path(os.environ.get("AGENT_WORKSPACE_STORE_DIR") or ".durable/workspace-store")
    return WorkspaceStore(_FileObjects(root))
