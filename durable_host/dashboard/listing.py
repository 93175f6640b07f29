"""What the dashboard's list and instance answers compute from store rows. Pure, no IO.

* ``sort_order``/``ordered``: the instance list newest first (the default), oldest first, or in
  instance id order. Stores list instances in id order only (the key order of an Azure table
  and of SQLite's primary key), so a time order is computed here over the rows a bounded scan
  read (``docs/host.md``: the dashboard says when the scan did not reach every instance).
* ``counts``: instances per runtime status, every status present (zero when none).
* ``parent_of``/``children``: an instance's parent and sub-orchestrations, from what the store keeps: the
  parent id on the instance's row (``InstanceRecord.parent_instance_id``, set from the
  ``ParentInstance`` of the execution's ``ExecutionStarted``), the children from the
  ``SubOrchestrationInstanceCreated`` events of its history (their ``InstanceId``).
* ``page_number``: a non-negative integer query parameter, or ``ValueError`` naming it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from durable_host.core.history import EventType
from durable_host.core.records import InstanceRecord

SORTS = ("newest", "oldest", "id")
DEFAULT_SORT = "newest"


def sort_order(raw: str | None) -> str:
    """The ``sort`` parameter: ``newest`` (default), ``oldest`` or ``id``."""
    if not raw:
        return DEFAULT_SORT
    if raw not in SORTS:
        raise ValueError(f"sort={raw!r} is not one of {', '.join(SORTS)}")
    return raw


def page_number(name: str, raw: str | None) -> int:
    """A non-negative integer parameter (``offset``); 0 when absent."""
    if not raw:
        return 0
    try:
        value = int(raw)
    except ValueError as exc:
        raise ValueError(f"{name}={raw!r} is not a number") from exc
    if value < 0:
        raise ValueError(f"{name}={raw!r} is negative")
    return value


def ordered(records: Iterable[InstanceRecord], sort: str) -> list[InstanceRecord]:
    """Instance rows in ``sort`` order, by the stored creation time (finer than the second the
    status shows); equal times fall back to the id, so the order (and so every page of it)
    is the same on every read."""
    if sort == "id":
        return sorted(records, key=lambda r: r.instance_id)
    return sorted(records, key=lambda r: (r.created_at, r.instance_id), reverse=sort == "newest")


def counts(records: Iterable[InstanceRecord], statuses: Iterable[str]) -> dict[str, int]:
    found = dict.fromkeys(statuses, 0)
    for record in records:
        found[record.status] = found.get(record.status, 0) + 1
    return found


def children(events: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The sub-orchestrations an execution started, in the order it started them."""
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for event in events:
        if event.get("EventType") != EventType.SUB_ORCHESTRATION_CREATED:
            continue
        child = event.get("InstanceId")
        if isinstance(child, str) and child and child not in seen:
            seen.add(child)
            out.append({"instanceId": child, "name": str(event.get("Name") or "")})
    return out


def parent_of(record_parent: str | None, events: Iterable[dict[str, Any]]) -> str | None:
    """The parent's instance id: the row's, else the ``ExecutionStarted`` event's."""
    if record_parent:
        return record_parent
    for event in events:
        if event.get("EventType") == EventType.EXECUTION_STARTED:
            parent = (event.get("ParentInstance") or {}).get("OrchestrationInstance") or {}
            found = parent.get("InstanceId")
            return found if isinstance(found, str) and found else None
    return None
