"""What the Store contract suites share: hand-made records, messages, events and episodes,
and the helpers that drive a store through them as the engine would.

Times are fixed strings (``T0``, ``at(seconds)``), never the clock. Used by
``test_store_contract.py``, ``test_store_contract_hub.py`` and the store-specific suites.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from durable_host.core.orchestration import Episode, Outgoing
from durable_host.functions.config import NON_RUNNING
from durable_host.store.base import InstanceRecord

T0 = "2026-01-01T00:00:00.000000Z"


def at(seconds: int) -> str:
    return f"2026-01-01T00:{seconds // 60:02d}:{seconds % 60:02d}.000000Z"


def record(instance_id: str, created: str = T0, status: str = "Pending") -> InstanceRecord:
    return InstanceRecord(
        instance_id=instance_id,
        name="orch",
        status=status,
        input_json='"in"',
        created_at=created,
        updated_at=created,
    )


def start_message(name: str = "orch") -> dict[str, Any]:
    return {
        "kind": "start",
        "event": {"EventType": 0, "EventId": -1, "Name": name, "Timestamp": T0},
    }


def event(n: int, kind: int = 4) -> dict[str, Any]:
    return {"EventType": kind, "EventId": n, "Name": "act", "Timestamp": T0, "IsPlayed": False}


def raised(name: str) -> dict[str, Any]:
    return {
        "kind": "event",
        "event": {"EventType": 14, "EventId": -1, "Name": name, "Timestamp": T0},
    }


def activity(instance_id: str, task_id: int) -> Outgoing:
    payload = {
        "instance_id": instance_id,
        "execution_id": "e1",
        "task_id": task_id,
        "name": "act",
        "input_json": json.dumps(task_id),
    }
    return Outgoing("activity", instance_id, payload)


async def started(store: Any, instance_id: str, *, events: int = 1, created: str = T0) -> None:
    """Create an instance and commit its first episode: Running, ``events`` history events."""
    await store.create_instance(record(instance_id, created), start_message(), NON_RUNNING)
    messages = await store.fetch_messages(instance_id, created)
    await store.commit_episode(
        instance_id,
        Episode(
            consumed=[i for i, _ in messages],
            events=[event(n) for n in range(events)],
            replace_history=True,
            execution_id="e1",
            status="Running",
            name="orch",
            input_json='"in"',
        ),
        created,
    )


def names(messages: list[tuple[int, dict[str, Any]]]) -> list[str]:
    return [m["event"]["Name"] for _, m in messages]


def fail_at_commit(kind: str, store: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the next commit fail after it has written part of its work."""
    if kind == "sqlite":
        from durable_host.store.sqlite import store as sqlite

        original = sqlite.write_outbox

        def write_then_fail(db: Any, episode: Episode) -> Any:
            original(db, episode)  # history, status and outbox are written in the transaction
            raise RuntimeError("injected failure before the commit")

        monkeypatch.setattr(sqlite, "write_outbox", write_then_fail)
        return
    if kind == "postgres":
        from tests.store.conftest import fail_postgres_commit

        fail_postgres_commit(monkeypatch)
        return

    async def refuse(commit: Any, ops: Any) -> None:
        raise RuntimeError("injected failure at the commit point, after staging")

    monkeypatch.setattr(store.commits, "commit_point", refuse)
