"""Skill registry: every version of every skill, stored once and never changed. IO.

A version is one JSON record ``{"name", "version", "digest", "definition", "registered_at",
"registered_by"}`` written with a create-if-absent write, so two registrations racing for the
same version number cannot both win: the loser reads again and takes the next number (or finds
its own definition already stored). The versioning rules are ``kernel.skills.skill`` (pure); this
module only stores and reads.

The port (``SkillStore``), kept by both implementations:

* ``create(record) -> bool``: store ``record`` under (name, version) unless that version
  exists; True if this call stored it;
* ``read(name, version) -> record | None``;
* ``versions(name) -> list[int]``: ascending; ``names() -> list[str]``: sorted.

``FileSkillStore``: one file per version, ``AGENT_SKILLS_DIR`` (default ``.durable/skills``)
``/<name>/<version:06d>.json``, written to a temporary file, fsynced, then hard-linked to its
name (a link fails if the name exists: an atomic create-if-absent with the whole content).
``BlobSkillStore``: one blob per version (``<name>/<version:06d>.json``) in
``AGENT_SKILLS_CONTAINER`` (default ``agent-skills``) on ``AzureWebJobsStorage``, put with
``If-None-Match: *`` and a token of its own in the metadata, so a put retried after a lost
answer knows whether the stored blob is its own. ``default_skill_store()`` chooses as the other
app state does (``adapters.app_state``).

``register(store, definition, registered_by, now)`` is the one registration: ``(record,
created)``; ``created`` is False when the latest version already holds this definition.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any, Protocol

from adapters import app_state
from kernel.skills import skill as skills

SKILLS_CONTAINER_DEFAULT = "agent-skills"
MAX_RACES = 20


class SkillStore(Protocol):
    def create(self, record: dict[str, Any]) -> bool: ...

    def read(self, name: str, version: int) -> dict[str, Any] | None: ...

    def versions(self, name: str) -> list[int]: ...

    def names(self) -> list[str]: ...


def _file_name(version: int) -> str:
    return f"{version:06d}.json"


def _version_of(file_name: str) -> int | None:
    stem = file_name.removesuffix(".json")
    return int(stem) if stem.isdigit() and file_name.endswith(".json") else None


class FileSkillStore:
    def __init__(self, root: Path | str | None = None):
        self.root = Path(root or os.environ.get("AGENT_SKILLS_DIR") or ".durable/skills")

    def create(self, record: dict[str, Any]) -> bool:
        folder = self.root / skills.valid_name(record["name"])
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / _file_name(int(record["version"]))
        tmp = folder / f".{uuid.uuid4().hex}.tmp"
        with open(tmp, "w", encoding="utf-8") as file:
            json.dump(record, file, sort_keys=True)
            file.flush()
            os.fsync(file.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        finally:
            tmp.unlink(missing_ok=True)
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        return True

    def read(self, name: str, version: int) -> dict[str, Any] | None:
        try:
            raw = (self.root / name / _file_name(version)).read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        found: dict[str, Any] = json.loads(raw)
        return found

    def versions(self, name: str) -> list[int]:
        folder = self.root / name
        if not folder.is_dir():
            return []
        found = (_version_of(p.name) for p in folder.iterdir())
        return sorted(v for v in found if v is not None)

    def names(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if p.is_dir() and self.versions(p.name))


class BlobSkillStore:
    def __init__(self, container: Any):
        self._container = container

    def create(self, record: dict[str, Any]) -> bool:
        name = skills.valid_name(record["name"])
        blob = self._container.get_blob_client(f"{name}/{_file_name(int(record['version']))}")
        return app_state.create_once(blob, json.dumps(record, sort_keys=True))

    def read(self, name: str, version: int) -> dict[str, Any] | None:
        from azure.core.exceptions import ResourceNotFoundError

        blob = self._container.get_blob_client(f"{name}/{_file_name(version)}")

        def download() -> bytes | None:
            try:
                return bytes(blob.download_blob().readall())
            except ResourceNotFoundError:
                return None

        raw = app_state.retry_transient(download)
        if raw is None:
            return None
        found: dict[str, Any] = json.loads(raw)
        return found

    def versions(self, name: str) -> list[int]:
        def listing() -> list[str]:
            return [b.name for b in self._container.list_blobs(name_starts_with=f"{name}/")]

        found = (_version_of(n.rsplit("/", 1)[-1]) for n in app_state.retry_transient(listing))
        return sorted(v for v in found if v is not None)

    def names(self) -> list[str]:
        def listing() -> list[str]:
            return [b.name for b in self._container.list_blobs()]

        return sorted({n.split("/", 1)[0] for n in app_state.retry_transient(listing) if "/" in n})


def default_skill_store() -> SkillStore:
    if app_state.state_store_kind() == "blob":
        name = app_state.container_name("AGENT_SKILLS_CONTAINER", SKILLS_CONTAINER_DEFAULT)
        return BlobSkillStore(app_state.container_client(app_state.storage_connection(), name))
    return FileSkillStore()


def latest(store: SkillStore, name: str) -> dict[str, Any] | None:
    versions = store.versions(name)
    return store.read(name, versions[-1]) if versions else None


def get(store: SkillStore, name: str, version: int | None = None) -> dict[str, Any] | None:
    return latest(store, name) if version is None else store.read(name, version)


def register(
    store: SkillStore, skill: skills.Skill, registered_by: dict[str, Any], now: str
) -> tuple[dict[str, Any], bool]:
    """Store ``skill`` as its next version unless the latest already holds it."""
    definition = skill.to_json()
    digest = skills.digest(definition)
    for _ in range(MAX_RACES):
        versions = store.versions(skill.name)
        current = store.read(skill.name, versions[-1]) if versions else None
        if skills.registration(current, digest) == "same":
            assert current is not None
            return current, False
        record = {
            "name": skill.name,
            "version": skills.next_version(versions),
            "digest": digest,
            "definition": definition,
            "registered_at": now,
            "registered_by": registered_by,
        }
        if store.create(record):
            return record, True
    raise RuntimeError(f"skill {skill.name!r}: {MAX_RACES} registrations raced; try again")
