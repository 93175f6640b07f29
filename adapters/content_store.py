"""Content store: large texts stored once, addressed by ``kernel.common.content.content_ref``.

Entries and submissions longer than the inline limit carry a ``sha256:<hex>`` reference
instead of the text, so the session entity and orchestration histories stay small.

The port (``ContentStore``), kept by every implementation:

* ``put(text) -> ref``: content-addressed, so writing the same text twice is harmless
  (idempotent: an existing copy is fine), and the write is durable before the reference is
  handed out;
* ``get(ref) -> text``: the text, verified against its hash. ``ContentNotFound`` when nothing is
  stored under ``ref`` (or ``ref`` is not a content reference); ``ContentCorrupt`` (a
  ``ContentNotFound``) when what is stored does not hash to ``ref`` - a damaged copy is an error,
  never returned.

``FileContentStore``: files under ``AGENT_CONTENT_DIR`` (default ``.durable/content`` in the
working directory), written to a temporary file, fsynced and renamed. ``BlobContentStore``: one
blob per text (``sha256/<hex>``) in ``AGENT_CONTENT_CONTAINER`` (default ``agent-content``), put
with ``If-None-Match: *`` (an existing blob is the same text) and an MD5 the service checks on
arrival. ``default_store()`` picks one from the app settings (``adapters.app_state``).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any, Protocol

from adapters import app_state
from kernel.common.content import content_ref, is_content_ref


class ContentNotFound(KeyError):
    pass


class ContentCorrupt(ContentNotFound):
    """What is stored under a reference does not hash to it. A ``ContentNotFound``, so every
    caller that handles a missing text handles a damaged one the same way."""


class ContentStore(Protocol):
    def put(self, text: str) -> str: ...

    def get(self, ref: str) -> str: ...


def _digest(ref: str) -> str:
    if not is_content_ref(ref):
        raise ContentNotFound(ref)
    return ref.removeprefix("sha256:")


def _verified(ref: str, data: bytes) -> str:
    if "sha256:" + hashlib.sha256(data).hexdigest() != ref:
        raise ContentCorrupt(f"the stored content of {ref} does not match its hash")
    return data.decode("utf-8")


class FileContentStore:
    def __init__(self, root: Path | None = None):
        self.root = Path(root or os.environ.get("AGENT_CONTENT_DIR", ".durable/content"))

    def _path(self, ref: str) -> Path:
        digest = _digest(ref)
        return self.root / digest[:2] / digest

    def put(self, text: str) -> str:
        ref = content_ref(text)
        path = self._path(ref)
        if path.exists():
            return ref
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        with tmp.open("w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(path)
        return ref

    def get(self, ref: str) -> str:
        try:
            return _verified(ref, self._path(ref).read_bytes())
        except FileNotFoundError as exc:
            raise ContentNotFound(ref) from exc


class BlobContentStore:
    """One blob per text in a container (a ``ContainerClient``); see the module docstring."""

    def __init__(self, container: Any):
        self._container = container

    def _blob(self, ref: str) -> Any:
        return self._container.get_blob_client(f"sha256/{_digest(ref)}")

    def put(self, text: str) -> str:
        from azure.core.exceptions import ResourceExistsError
        from azure.storage.blob import ContentSettings

        ref = content_ref(text)
        blob = self._blob(ref)
        data = text.encode("utf-8")

        def upload() -> None:
            try:
                blob.upload_blob(
                    data,
                    overwrite=False,
                    validate_content=True,
                    content_settings=ContentSettings(content_type="text/plain; charset=utf-8"),
                )
            except ResourceExistsError:
                pass  # the same text is there already (or an earlier try of ours got through)

        app_state.retry_transient(upload)
        return ref

    def get(self, ref: str) -> str:
        from azure.core.exceptions import ResourceNotFoundError

        blob = self._blob(ref)

        def download() -> bytes:
            try:
                return bytes(blob.download_blob().readall())
            except ResourceNotFoundError as exc:
                raise ContentNotFound(ref) from exc

        return _verified(ref, app_state.retry_transient(download))


def default_store() -> ContentStore:
    """The store the app settings choose (see the module docstring)."""
    if app_state.state_store_kind() == "blob":
        name = app_state.container_name(
            "AGENT_CONTENT_CONTAINER", app_state.CONTENT_CONTAINER_DEFAULT
        )
        return BlobContentStore(app_state.container_client(app_state.storage_connection(), name))
    return FileContentStore()
