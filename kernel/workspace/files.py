"""A session's workspace as data: paths, manifests, snapshots and their differences. Pure.

A workspace is a tree of files the agent's tools work in (docs/workspace.md). What is kept of
it is a **snapshot**: ``{"files": manifest, "parent", "task", "changed", "at"}`` where the
manifest maps a path to ``{"hash": <sha256 hex of the content>, "size", "mode"}``, ``parent``
is the snapshot it was made from (None for the first), ``task`` the task that committed it and
``changed`` the paths it added, changed or deleted. ``snapshot_id`` is the sha256 of the
snapshot's canonical JSON, so a snapshot is content-addressed like the files it names.

Contract:
* ``normalize_path(raw)`` returns the canonical relative path (``a/b.txt``: ``/``-separated,
  no ``.`` or empty segments) or raises ``PathProblem`` naming what is wrong: empty, absolute,
  a drive or backslash, ``..``, a control character, too long, too deep. Nothing else is a
  workspace path, so a path that passes cannot leave the workspace directory.
* ``limit_problems(files, limits)`` lists what breaks the size and count limits.
* ``diff(old, new)`` names the added, changed and deleted paths.
* ``make_snapshot`` builds a snapshot from a parent and a manifest; ``snapshot_id`` names it.
* ``changed_by(chain)`` says, for each path of the newest snapshot, which task last changed it.

The session's committed snapshot is the session document ``WORKSPACE_DOCUMENT`` (type
``json``: ``{"snapshot", "task", "changed"}``), written with the task's "tool completed"
commit, so a crash before that commit leaves the previous snapshot as the truth.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

WORKSPACE_DOCUMENT = "workspace"
SNAPSHOT_ID_PATTERN = re.compile(r"^[0-9a-f]{64}$")
MAX_PATH_CHARS = 256
MAX_PATH_DEPTH = 16
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_DRIVE = re.compile(r"^[A-Za-z]:")

FileEntry = dict[str, Any]  # {"hash", "size", "mode"}
Manifest = dict[str, FileEntry]


class PathProblem(ValueError):
    """A path that is not a workspace path; the message says why."""


@dataclass(frozen=True, slots=True)
class Limits:
    """How much a workspace may hold (``AGENT_WORKSPACE_MAX_*``, docs/workspace.md)."""

    max_file_bytes: int = 1024 * 1024
    max_files: int = 200
    max_total_bytes: int = 16 * 1024 * 1024

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Limits:
        def number(name: str, default: int) -> int:
            raw = env.get(name)
            try:
                value = int(raw) if raw else default
            except ValueError:
                return default
            return value if value > 0 else default

        defaults = cls()
        return cls(
            max_file_bytes=number("AGENT_WORKSPACE_MAX_FILE_BYTES", defaults.max_file_bytes),
            max_files=number("AGENT_WORKSPACE_MAX_FILES", defaults.max_files),
            max_total_bytes=number("AGENT_WORKSPACE_MAX_TOTAL_BYTES", defaults.max_total_bytes),
        )


def normalize_path(raw: object) -> str:
    """The canonical form of a workspace path, or ``PathProblem`` naming what is wrong."""
    if not isinstance(raw, str) or not raw.strip():
        raise PathProblem("must be a non-empty relative path")
    if _CONTROL.search(raw):
        raise PathProblem("must not contain control characters")
    if "\\" in raw:
        raise PathProblem("must use '/' as its separator, not '\\'")
    if raw.startswith("/") or _DRIVE.match(raw):
        raise PathProblem(f"must be relative, not absolute: {raw[:80]!r}")
    parts = [part for part in raw.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise PathProblem(f"must not contain '..': {raw[:80]!r}")
    if not parts:
        raise PathProblem("names no file")
    path = "/".join(parts)
    if len(path) > MAX_PATH_CHARS:
        raise PathProblem(f"longer than {MAX_PATH_CHARS} characters")
    if len(parts) > MAX_PATH_DEPTH:
        raise PathProblem(f"deeper than {MAX_PATH_DEPTH} directories")
    return path


def content_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def limit_problems(files: Mapping[str, FileEntry], limits: Limits) -> list[str]:
    """What in ``files`` breaks ``limits``: each ``"<path or workspace>: <what>"``."""
    problems = [
        f"{path}: {entry['size']} bytes, more than the {limits.max_file_bytes} a file may hold"
        for path, entry in sorted(files.items())
        if entry["size"] > limits.max_file_bytes
    ]
    if len(files) > limits.max_files:
        problems.append(f"workspace: {len(files)} files, more than the {limits.max_files} allowed")
    total = sum(entry["size"] for entry in files.values())
    if total > limits.max_total_bytes:
        problems.append(
            f"workspace: {total} bytes in all, more than the {limits.max_total_bytes} allowed"
        )
    return problems


def diff(old: Mapping[str, FileEntry], new: Mapping[str, FileEntry]) -> dict[str, list[str]]:
    """The paths ``new`` added, changed (content or mode) and deleted, each sorted."""
    return {
        "added": sorted(set(new) - set(old)),
        "changed": sorted(p for p in set(new) & set(old) if _key(new[p]) != _key(old[p])),
        "deleted": sorted(set(old) - set(new)),
    }


def _key(entry: FileEntry) -> tuple[str, int]:
    return entry["hash"], int(entry.get("mode", 0o644))


def changed_paths(old: Mapping[str, FileEntry], new: Mapping[str, FileEntry]) -> list[str]:
    parts = diff(old, new)
    return sorted(parts["added"] + parts["changed"] + parts["deleted"])


def make_snapshot(
    files: Mapping[str, FileEntry],
    *,
    parent: str | None,
    parent_files: Mapping[str, FileEntry],
    task: str,
    at: str,
) -> dict[str, Any]:
    """A snapshot of ``files`` made by ``task`` from ``parent``."""
    return {
        "files": {path: dict(files[path]) for path in sorted(files)},
        "parent": parent,
        "task": task,
        "changed": changed_paths(parent_files, files),
        "at": at,
    }


def canonical(snapshot: Mapping[str, Any]) -> bytes:
    return json.dumps(snapshot, sort_keys=True, separators=(",", ":")).encode("utf-8")


def snapshot_id(snapshot: Mapping[str, Any]) -> str:
    return content_hash(canonical(snapshot))


def is_snapshot_id(value: object) -> bool:
    return isinstance(value, str) and bool(SNAPSHOT_ID_PATTERN.match(value))


def committed(document: Mapping[str, Any] | None) -> tuple[str | None, int]:
    """The committed snapshot id (None: an empty workspace) and the document's version (0:
    none yet), from the session's ``WORKSPACE_DOCUMENT``."""
    if not document or document.get("deleted"):
        return None, int(document.get("version", 0)) if document else 0
    data = document.get("data") or {}
    snapshot = data.get("snapshot") if isinstance(data, Mapping) else None
    return (snapshot if is_snapshot_id(snapshot) else None), int(document.get("version", 0))


def document_change(
    snapshot: str, task: str, changed: Sequence[str], expected_version: int
) -> dict[str, Any]:
    """The session document change that commits ``snapshot``: refused (version conflict) if
    another snapshot was committed since ``expected_version`` was read."""
    return {
        "id": WORKSPACE_DOCUMENT,
        "type": "json",
        "data": {"snapshot": snapshot, "task": task, "changed": list(changed)[:50]},
        "expected_version": expected_version,
    }


def changed_by(chain: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """For each path of ``chain[0]`` (the newest snapshot; ``chain`` runs newest first), the
    task of the newest snapshot that changed it. A path older than the chain keeps the task
    of the oldest snapshot read."""
    if not chain:
        return {}
    files = chain[0]["files"]
    owners: dict[str, str] = {}
    for snapshot in chain:
        for path in snapshot.get("changed") or ():
            if path in files and path not in owners:
                owners[path] = str(snapshot.get("task") or "")
    oldest = str(chain[-1].get("task") or "")
    return {path: owners.get(path, oldest) for path in files}
