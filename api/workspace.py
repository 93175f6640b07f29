"""HTTP API of a session's workspace: its snapshots, their files, and uploads (docs/api.md).

* ``GET  sessions/{id}/workspace[?snapshot=<id>]``: the committed (or the named) snapshot:
  ``{sessionId, snapshot, task, parent, at, files: [{path, size, hash, mode, changedBy}]}``;
  ``changedBy`` is the task that last changed the file (read back through the snapshots'
  parents, ``CHAIN_LIMIT`` deep). A session without files answers ``snapshot: null``.
* ``GET  sessions/{id}/workspace/snapshots``: the committed snapshot and its ancestors, newest
  first: ``[{snapshot, task, parent, at, changed}]`` - which task committed what.
* ``GET  sessions/{id}/workspace/files/{path}[?snapshot=<id>]``: the file's bytes.
* ``PUT  sessions/{id}/workspace/files/{path}``: the body becomes that file (a person's input),
  committed as a snapshot of its own whose task is ``upload:<commit instance>``; 201 with
  ``{snapshot, path, size, task}``. 409 when another snapshot was committed meanwhile.

Bad input is answered before anything is stored: a path that is absolute, holds ``..`` or a
backslash, is too long or too deep (400 ``invalid_path``, field ``path``), a file or a
workspace over the limits (400 ``workspace_limit``), a snapshot id that is not one (400) or
names nothing of this session (404). The session must exist (404), and belong to the caller.
"""

from __future__ import annotations

import asyncio
import os
import time
from datetime import UTC, datetime
from typing import Any

import azure.durable_functions as df
import azure.functions as func

from adapters.workspace_store import WorkspaceMissing, WorkspaceStore, default_store
from api import inputs, principals
from api.replies import failure, reply
from api.sessions import LEVEL, current_state
from entities import session_pages
from kernel.common.errors import ConflictError, KernelError, NotFoundError, ValidationError
from kernel.workspace import files as workspace

bp = df.Blueprint()
CHAIN_LIMIT = 50
COMMIT_WAIT_S = 30.0


def _path(req: func.HttpRequest) -> str:
    try:
        return workspace.normalize_path(req.route_params.get("path"))
    except workspace.PathProblem as exc:
        raise ValidationError("invalid_path", str(exc), "path") from exc


async def _head(req: func.HttpRequest, client: df.DurableOrchestrationClient) -> tuple[str, Any]:
    session_id = inputs.session_id(req.route_params.get("sessionId"))
    state = await current_state(client, session_id, principals.caller(req))
    return session_id, state


def _chosen(req: func.HttpRequest, state: Any, store: WorkspaceStore) -> str | None:
    """The snapshot a read asks for (``?snapshot=``) or the committed one."""
    head, _ = workspace.committed(session_pages.document(state, workspace.WORKSPACE_DOCUMENT))
    wanted = req.params.get("snapshot")
    if wanted is None:
        return head
    if not workspace.is_snapshot_id(wanted):
        raise ValidationError("invalid_snapshot", "a snapshot id is 64 hex digits", "snapshot")
    if wanted not in {s["id"] for s in store.chain(head, CHAIN_LIMIT * 20)}:
        raise NotFoundError("snapshot_not_found", f"no snapshot {wanted} here", "snapshot")
    return wanted


@bp.route(route="sessions/{sessionId}/workspace", methods=["GET"], auth_level=LEVEL)
@bp.durable_client_input(client_name="client")
async def get_workspace(
    req: func.HttpRequest, client: df.DurableOrchestrationClient
) -> func.HttpResponse:
    store = default_store()
    try:
        session_id, state = await _head(req, client)
        chosen = await asyncio.to_thread(_chosen, req, state, store)
        chain = await asyncio.to_thread(store.chain, chosen, CHAIN_LIMIT)
    except KernelError as exc:
        return failure(exc)
    body: dict[str, Any] = {"sessionId": session_id, "snapshot": chosen, "files": []}
    if chain:
        newest = chain[0]
        owners = workspace.changed_by(chain)
        body.update(task=newest.get("task"), parent=newest.get("parent"), at=newest.get("at"))
        body["files"] = [
            {**entry, "path": path, "changedBy": owners.get(path)}
            for path, entry in sorted(newest["files"].items())
        ]
    return reply(body)


@bp.route(route="sessions/{sessionId}/workspace/snapshots", methods=["GET"], auth_level=LEVEL)
@bp.durable_client_input(client_name="client")
async def get_snapshots(
    req: func.HttpRequest, client: df.DurableOrchestrationClient
) -> func.HttpResponse:
    store = default_store()
    try:
        session_id, state = await _head(req, client)
        head, _ = workspace.committed(session_pages.document(state, workspace.WORKSPACE_DOCUMENT))
        chain = await asyncio.to_thread(store.chain, head, CHAIN_LIMIT)
    except KernelError as exc:
        return failure(exc)
    snapshots = [
        {
            "snapshot": s["id"],
            "task": s.get("task"),
            "parent": s.get("parent"),
            "at": s.get("at"),
            "changed": s.get("changed") or [],
            "files": len(s["files"]),
        }
        for s in chain
    ]
    return reply({"sessionId": session_id, "snapshots": snapshots})


@bp.route(route="sessions/{sessionId}/workspace/files/{*path}", methods=["GET"], auth_level=LEVEL)
@bp.durable_client_input(client_name="client")
async def get_file(
    req: func.HttpRequest, client: df.DurableOrchestrationClient
) -> func.HttpResponse:
    store = default_store()
    try:
        path = _path(req)
        _, state = await _head(req, client)
        chosen = await asyncio.to_thread(_chosen, req, state, store)
        files = (await asyncio.to_thread(store.get_snapshot, chosen))["files"] if chosen else {}
        entry = files.get(path)
        if entry is None:
            raise NotFoundError("file_not_found", f"no file {path} in the workspace", "path")
        data = await asyncio.to_thread(store.get_file, entry["hash"])
    except KernelError as exc:
        return failure(exc)
    except WorkspaceMissing:
        return failure(NotFoundError("file_not_found", "the file's content is gone", "path"))
    return func.HttpResponse(
        data,
        status_code=200,
        mimetype="application/octet-stream",
        headers={"ETag": f'"{entry["hash"]}"', "X-Content-Type-Options": "nosniff"},
    )


@bp.route(route="sessions/{sessionId}/workspace/files/{*path}", methods=["PUT"], auth_level=LEVEL)
@bp.durable_client_input(client_name="client")
async def put_file(
    req: func.HttpRequest, client: df.DurableOrchestrationClient
) -> func.HttpResponse:
    store = default_store()
    try:
        path = _path(req)
        session_id, state = await _head(req, client)
        data = req.get_body() or b""
        head, version = workspace.committed(
            session_pages.document(state, workspace.WORKSPACE_DOCUMENT)
        )
        parent = (await asyncio.to_thread(store.get_snapshot, head))["files"] if head else {}
        files = {**parent, path: {"hash": workspace.content_hash(data), "size": len(data),
                                  "mode": 0o644}}  # fmt: skip
        if any(p.startswith(path + "/") for p in parent):
            raise ValidationError("invalid_path", f"{path} is a directory here", "path")
        if any(path.startswith(p + "/") for p in parent):
            raise ValidationError("invalid_path", f"a parent of {path} is a file here", "path")
        problems = workspace.limit_problems(files, workspace.Limits.from_env(os.environ))
        if problems:
            raise ValidationError("workspace_limit", "; ".join(problems)[:1000], "body")
        if parent.get(path) == files[path]:
            return reply({"snapshot": head, "path": path, "size": len(data), "unchanged": True})
        await asyncio.to_thread(store.put_file, data)
        instance = f"{session_id}:workspace:{workspace.content_hash(data)[:16]}:{version}"
        snapshot = workspace.make_snapshot(
            files, parent=head, parent_files=parent, task=f"upload:{instance}", at=_now()
        )
        new_id = await asyncio.to_thread(store.put_snapshot, snapshot)
        change = workspace.document_change(new_id, f"upload:{instance}", [path], version)
        answer = await _commit(client, instance, session_id, change)
    except KernelError as exc:
        return failure(exc)
    if not answer.get("ok"):
        error = answer.get("error") or {}
        return failure(
            ConflictError(
                "workspace_conflict",
                f"the workspace changed while the file was uploaded; try again ({error})"[:500],
                "path",
            )
        )
    return reply(
        {"snapshot": new_id, "path": path, "size": len(data), "task": f"upload:{instance}"},
        status=201,
    )


async def _commit(
    client: df.DurableOrchestrationClient, instance: str, session_id: str, change: Any
) -> dict[str, Any]:
    """Start (or find) the commit orchestration and wait for its answer, bounded."""
    status = await client.get_status(instance)
    if not status or not getattr(status, "runtime_status", None):
        await client.start_new(
            "workspace_commit", instance, {"session_id": session_id, "document": change}
        )
    deadline = time.monotonic() + COMMIT_WAIT_S
    while time.monotonic() < deadline:
        status = await client.get_status(instance)
        state = getattr(getattr(status, "runtime_status", None), "value", None)
        if state == "Completed":
            output = status.output
            return output if isinstance(output, dict) else {"ok": False}
        if state in ("Failed", "Terminated"):
            return {"ok": False, "error": {"error": "commit_failed"}}
        await asyncio.sleep(0.1)
    raise ConflictError("workspace_busy", "the upload's commit did not finish in time", "path")


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
