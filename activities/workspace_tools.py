"""The workspace tools run by ``execute_tool``: ``list_files``, ``read_file``, ``write_file``,
``edit_file``, ``delete_file`` and ``run_python`` (docs/workspace.md).

Contract, for every tool: ``(arguments, env) -> Outcome``; the arguments are the catalogue's
validated final ones (paths already normalised, ``kernel.turn.tools``).

* The reading tools answer from the session's **committed** snapshot (the ``workspace``
  session document), read from the workspace store: what a crashed attempt left on some disk
  is never seen.
* A changing tool first **rehydrates** this host's directory for the session to the committed
  snapshot (``adapters.workspace_local.rehydrate``: missing or stale files written, anything
  uncommitted removed), acts on it, scans it, and - when the files changed and the limits
  hold - stores the new files and a snapshot and returns the ``workspace`` document change
  with ``expected_version`` = the version it rehydrated from. The tool task commits that change
  with "tool completed", so the snapshot becomes the truth exactly then; a snapshot committed
  meanwhile by someone else refuses it (``version_conflict``, the tool failed).
* A step that fails (a missing file, an ambiguous edit, a snippet that exits non-zero or is
  stopped at a limit, a workspace over its limits) commits nothing, and the directory is put
  back to the committed snapshot at once.

Results carry ``snapshot`` (the committed or new id) and ``changed`` (the paths).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from activities.tool_env import Outcome, Result, ToolEnv
from adapters import sandbox
from adapters.workspace_local import local_dir, rehydrate, scan, store_files
from adapters.workspace_store import WorkspaceStore, default_store
from entities import session_pages
from kernel.workspace import files as workspace

MAX_READ_CHARS = 64 * 1024
MAX_LISTED = 200


async def _committed(env: ToolEnv) -> tuple[str | None, int]:
    head = await session_pages.read_head(env.client, env.session_id)
    return workspace.committed(session_pages.document(head, workspace.WORKSPACE_DOCUMENT))


def _files(store: WorkspaceStore, snapshot_id: str | None) -> workspace.Manifest:
    return dict(store.get_snapshot(snapshot_id)["files"]) if snapshot_id else {}


def _outcome(result: Result, documents: list[dict[str, Any]] | None = None) -> Outcome:
    return Outcome(result, documents or [])


async def list_files(args: dict[str, Any], env: ToolEnv) -> Any:
    snapshot_id, _ = await _committed(env)
    files = await asyncio.to_thread(_files, default_store(), snapshot_id)
    prefix = str(args.get("prefix") or "").strip("/")
    listed = [
        {"path": path, "size": entry["size"]}
        for path, entry in sorted(files.items())
        if not prefix or path == prefix or path.startswith(prefix + "/")
    ]
    return _outcome(
        {
            "ok": True,
            "snapshot": snapshot_id,
            "count": len(listed),
            "files": listed[:MAX_LISTED],
            "truncated": len(listed) > MAX_LISTED,
        }
    )


async def read_file(args: dict[str, Any], env: ToolEnv) -> Any:
    path = args["path"]
    snapshot_id, _ = await _committed(env)
    store = default_store()
    files = await asyncio.to_thread(_files, store, snapshot_id)
    entry = files.get(path)
    if entry is None:
        return _outcome(_not_found(path))
    data = await asyncio.to_thread(store.get_file, entry["hash"])
    text = data.decode("utf-8", errors="replace")
    return _outcome(
        {
            "ok": True,
            "path": path,
            "snapshot": snapshot_id,
            "size": entry["size"],
            "text": text[:MAX_READ_CHARS],
            "truncated": len(text) > MAX_READ_CHARS,
        }
    )


def _not_found(path: str) -> Result:
    return {
        "ok": False,
        "kind": "not_found",
        "message": f"there is no file {path} in the workspace",
    }


Act = Callable[[Path], Awaitable[Result]]


async def _change(env: ToolEnv, act: Act) -> Any:
    """Rehydrate, ``act``, and snapshot what it left (see the module docstring)."""
    snapshot_id, version = await _committed(env)
    store = default_store()
    parent = await asyncio.to_thread(_files, store, snapshot_id)
    directory = local_dir(env.session_id)
    await asyncio.to_thread(rehydrate, directory, parent, store)
    result = await act(directory)
    if not result.get("ok"):
        await asyncio.to_thread(rehydrate, directory, parent, store)
        return _outcome({**result, "snapshot": snapshot_id, "changed": []})
    files, problems = await asyncio.to_thread(scan, directory)
    problems += workspace.limit_problems(files, workspace.Limits.from_env(os.environ))
    if problems:
        await asyncio.to_thread(rehydrate, directory, parent, store)
        message = "the workspace was not changed: " + "; ".join(problems)
        return _outcome(
            {**result, "ok": False, "kind": "workspace_limit", "message": message[:1000]}
        )
    changed = workspace.changed_paths(parent, files)
    if not changed:
        return _outcome({**result, "snapshot": snapshot_id, "changed": []})
    await asyncio.to_thread(store_files, directory, files, store)
    at = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    snapshot = workspace.make_snapshot(
        files, parent=snapshot_id, parent_files=parent, task=env.task_id, at=at
    )
    new_id = await asyncio.to_thread(store.put_snapshot, snapshot)
    change = workspace.document_change(new_id, env.task_id, changed, version)
    return _outcome({**result, "snapshot": new_id, "changed": changed}, [change])


def _write(target: Path, data: bytes) -> None:
    """Through a temporary file and a rename: the file is whole or absent under its name."""
    if target.is_dir():
        raise IsADirectoryError(f"{target.name} is a directory")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    tmp.replace(target)


async def write_file(args: dict[str, Any], env: ToolEnv) -> Any:
    path, data = args["path"], str(args["text"]).encode("utf-8")

    async def act(directory: Path) -> Result:
        await asyncio.to_thread(_write, directory / path, data)
        return {"ok": True, "path": path, "size": len(data)}

    return await _change(env, act)


async def edit_file(args: dict[str, Any], env: ToolEnv) -> Any:
    path, old, new = args["path"], str(args["old"]), str(args["new"])

    async def act(directory: Path) -> Result:
        target = directory / path
        if not target.is_file():
            return _not_found(path)
        text = target.read_bytes().decode("utf-8", errors="strict")
        count = text.count(old)
        if count != 1:
            what = "does not occur" if count == 0 else f"occurs {count} times"
            message = f"the text to replace {what} in {path}; it must occur exactly once"
            return {"ok": False, "kind": "edit_not_applied", "message": message}
        await asyncio.to_thread(_write, target, text.replace(old, new, 1).encode("utf-8"))
        return {"ok": True, "path": path}

    return await _change(env, act)


async def delete_file(args: dict[str, Any], env: ToolEnv) -> Any:
    path = args["path"]

    async def act(directory: Path) -> Result:
        target = directory / path
        if not target.is_file():
            return _not_found(path)
        target.unlink()
        return {"ok": True, "path": path, "deleted": True}

    return await _change(env, act)


async def run_python(args: dict[str, Any], env: ToolEnv) -> Any:
    code = str(args["code"])

    async def act(directory: Path) -> Result:
        limits = sandbox.SandboxLimits.from_env()
        ran = await asyncio.to_thread(sandbox.run, code, directory, limits)
        report = ran.to_dict()
        if ran.stopped:
            message = f"run_python: stopped at its {ran.stopped.replace('_', ' ')} limit"
            return {**report, "ok": False, "kind": "tool_error", "message": message}
        if ran.exit_code != 0:
            last = ran.stderr.strip().splitlines()[-1:] or [f"exit status {ran.exit_code}"]
            message = f"run_python: the snippet failed: {last[0][:300]}"
            return {**report, "ok": False, "kind": "python_error", "message": message}
        return {**report, "ok": True}

    return await _change(env, act)


TOOLS: dict[str, Callable[[dict[str, Any], ToolEnv], Awaitable[Any]]] = {
    "list_files": list_files,
    "read_file": read_file,
    "write_file": write_file,
    "edit_file": edit_file,
    "delete_file": delete_file,
    "run_python": run_python,
}
