"""Content store: large texts stored once, addressed by ``kernel.content.content_ref``.

Entries and submissions longer than the inline limit carry a ``sha256:<hex>`` reference
instead of the text, so the session entity and orchestration histories stay small. The
store is content-addressed, so writing the same text twice is harmless (idempotent), and
a write is durable (fsync) before the reference is handed out.

Implementation: files under ``AGENT_CONTENT_DIR`` (default ``.durable/content`` in the
working directory). A blob container is the natural implementation on Azure.
"""

from __future__ import annotations

import os
from pathlib import Path

from kernel.content import content_ref


class ContentNotFound(KeyError):
    pass


class FileContentStore:
    def __init__(self, root: Path | None = None):
        self.root = Path(root or os.environ.get("AGENT_CONTENT_DIR", ".durable/content"))

    def _path(self, ref: str) -> Path:
        digest = ref.removeprefix("sha256:")
        if len(digest) != 64 or not all(c in "0123456789abcdef" for c in digest):
            raise ContentNotFound(ref)
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
            return self._path(ref).read_text(encoding="utf-8")
        except FileNotFoundError as exc:
            raise ContentNotFound(ref) from exc


def default_store() -> FileContentStore:
    return FileContentStore()
