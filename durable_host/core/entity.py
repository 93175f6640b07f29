"""One entity batch: pending operations in, new state and caller responses out. Pure.

Operations are applied in inbox order (FIFO per sender, since each sender's messages
are enqueued in order) through the SDK's own entity handle, one batch per episode.
Every non-signal operation gets exactly one response, an ``EventRaised`` named after
its request id, addressed to the calling orchestration's execution. An operation that
raises keeps the state changes the SDK leaves (the SDK does not roll back), and the
caller receives the error. The host owns nothing of the state: it passes the stored
JSON text through untouched unless the SDK changed it. A batch given a ``poison`` reason
(the entity's code crashed the host on every attempt) does not run: each operation fails
with that reason and the state stays as it was. Messages that are not operations (an
undecodable inbox row, say) are consumed and answer nobody.

Time: ``now`` is when the batch started (the entity's last-operation time). A response
exists only once the batch has run, so responses carry ``clock()`` read after it ran
(``now`` when no clock is given): the caller must not see an answer dated before the
operations it answers were applied. The caller supplies the clock; this module reads none.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from durable_host.core import history as h
from durable_host.core import wire
from durable_host.core.records import EntityCommit, MessageKind

EntityHandle = Callable[[str], str]


def run_batch(
    handle: EntityHandle | None,
    instance_id: str,
    exists: bool,
    state_json: str | None,
    messages: list[tuple[int, dict[str, Any]]],
    now: str,
    poison: str | None = None,
    clock: Callable[[], str] | None = None,
) -> EntityCommit:
    name, key = wire.split_entity_id(instance_id)
    requests = [m["request"] for _, m in messages if m.get("kind") == MessageKind.OP]
    ops = [
        wire.EntityOperation(
            request_id=r["id"],
            name=r.get("op", ""),
            input_json=r.get("input"),
            is_signal=bool(r.get("signal")),
            parent=r.get("parent"),
            parent_execution=r.get("parentExecution"),
        )
        for r in requests
    ]
    if poison is not None:
        error = json.dumps(f"Entity function '{name}' failed: {poison}")
        results = [{"isError": True, "result": error} for _ in ops]
    else:
        results, exists, state_json = _execute(handle, name, key, exists, state_json, ops)
    answered = clock() if clock is not None else now
    responses = [
        (op.parent, _response(op, result, answered))
        for op, result in zip(ops, results, strict=True)
        if not op.is_signal and op.parent
    ]
    return EntityCommit(
        instance_id=instance_id,
        consumed=[message_id for message_id, _ in messages],
        exists=exists,
        state_json=state_json,
        responses=responses,
        now=now,
    )


def _execute(
    handle: EntityHandle | None,
    name: str,
    key: str,
    exists: bool,
    state_json: str | None,
    ops: list[wire.EntityOperation],
) -> tuple[list[dict[str, Any]], bool, str | None]:
    if not ops:
        return [], exists, state_json
    if handle is None:
        error = json.dumps(f"The entity '{name}' is not defined by this app.")
        return [{"isError": True, "result": error} for _ in ops], exists, state_json
    try:
        raw = handle(wire.encode_entity_batch(name, key, exists, state_json, ops))
        batch = wire.decode_entity_batch(raw)
    except Exception as exc:  # noqa: BLE001 - user-code failure is data
        error = json.dumps(f"Entity function '{name}' failed: {exc}")
        return [{"isError": True, "result": error} for _ in ops], exists, state_json
    results = batch.results + [{"isError": True, "result": json.dumps("no result")}] * (
        len(ops) - len(batch.results)
    )
    return results[: len(ops)], batch.exists, batch.state_json


def _response(op: wire.EntityOperation, result: dict[str, Any], now: str) -> dict[str, Any]:
    event = h.event_raised(now, op.request_id, wire.entity_response(result))
    return {"kind": MessageKind.EVENT, "event": event, "execution_id": op.parent_execution}
