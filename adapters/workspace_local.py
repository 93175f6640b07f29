"""A session's workspace on this host's disk, made equal to a committed snapshot and read back.

* ``local_dir(session_id)``: ``AGENT_WORKSPACE_DIR`` (default ``.durable/workspaces``) /
  session. Only a cache: any host may lose it, and ``rehydrate`` rebuilds it.
* ``rehydrate(directory, files, store)``: makes the directory hold exactly ``files`` (a
  manifest): writes what is missing or differs (from the store, through a temporary file and a
  rename, so no half-written file is ever seen under its name), deletes every other entry -
  what a crashed attempt left uncommitted, symlinks included. Returns what it changed.
* ``scan(directory)``: the manifest of the directory as it is, plus what a snapshot cannot hold
  (symlinks, sockets and the like) as problems; a file that is read is hashed from the bytes
  read, never trusted from its name or size.
* ``store_files(directory, files, store)``: stores every file of a scanned manifest.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path
from typing import Any

from adapters.workspace_store import WorkspaceStore
from kernel.workspace import files as workspace


def local_dir(session_id: str) -> Path:
    root = Path(os.environ.get("AGENT_WORKSPACE_DIR") or ".durable/workspaces")
    return root / session_id


def _mode(st: os.stat_result) -> int:
    # Only the executable bit is kept: other bits would differ between hosts for no reason.
    return 0o755 if st.st_mode & stat.S_IXUSR else 0o644


def scan(directory: Path) -> tuple[workspace.Manifest, list[str]]:
    """The manifest of ``directory`` and the problems that keep a snapshot from holding it."""
    files: workspace.Manifest = {}
    problems: list[str] = []
    if not directory.is_dir():
        return files, problems
    for current, dirs, names in os.walk(directory, followlinks=False):
        base = Path(current)
        for name in sorted(dirs):
            if (base / name).is_symlink():
                rel = (base / name).relative_to(directory).as_posix()
                problems.append(f"{rel}: is a symbolic link; a workspace holds only files")
                dirs.remove(name)
        for name in sorted(names):
            path = base / name
            rel = path.relative_to(directory).as_posix()
            st = path.lstat()
            if not stat.S_ISREG(st.st_mode):
                kind = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a regular file"
                problems.append(f"{rel}: is {kind}; a workspace holds only files")
                continue
            try:
                workspace.normalize_path(rel)
            except workspace.PathProblem as exc:
                problems.append(f"{rel}: {exc}")
                continue
            data = path.read_bytes()
            files[rel] = {
                "hash": workspace.content_hash(data),
                "size": len(data),
                "mode": _mode(st),
            }
    return files, problems


def store_files(directory: Path, files: workspace.Manifest, store: WorkspaceStore) -> None:
    for rel, entry in files.items():
        data = (directory / rel).read_bytes()
        if workspace.content_hash(data) != entry["hash"]:
            raise RuntimeError(f"{rel} changed while its snapshot was being taken")
        store.put_file(data)


def rehydrate(directory: Path, files: workspace.Manifest, store: WorkspaceStore) -> dict[str, Any]:
    """Make ``directory`` hold exactly ``files``; ``{"written": [...], "removed": [...]}``."""
    directory.mkdir(parents=True, exist_ok=True)
    present, _ = scan(directory)
    removed: list[str] = []
    for current, dirs, names in os.walk(directory, topdown=False, followlinks=False):
        base = Path(current)
        for name in names + dirs:
            path = base / name
            rel = path.relative_to(directory).as_posix()
            if path.is_symlink() or (path.is_file() and rel not in files):
                path.unlink()
                removed.append(rel)
            elif path.is_dir() and not any(path.iterdir()):
                path.rmdir()
            elif not path.is_dir() and not path.is_file():
                path.unlink()  # a socket or fifo a snippet left
                removed.append(rel)
    written: list[str] = []
    for rel, entry in sorted(files.items()):
        have = present.get(rel)
        if have is not None and (have["hash"], have["mode"]) == (entry["hash"], entry["mode"]):
            continue
        target = directory / rel
        if target.is_dir():
            shutil.rmtree(target)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.rehydrate")
        tmp.write_bytes(store.get_file(entry["hash"]))
        tmp.chmod(int(entry.get("mode", 0o644)))
        tmp.replace(target)
        written.append(rel)
    return {"written": written, "removed": sorted(removed)}
