"""Conversation entries: the append-only, numbered transcript of a session. Pure.

An entry is ``{n, conversation, role, kind, text, content_ref, data, submission_id, at}``:
``n`` is 1, 2, 3... over the whole session in append order; exactly one of ``text`` and
``content_ref`` is set unless the entry carries only ``data`` (both are then ``None``).

Contract:
* Entries are never changed or removed, so ``n`` is a stable reference that model-call
  activities receive instead of the transcript.
* A conversation is created by its first entry (``main`` exists from the start); its
  creation is logged as a change item of its own.
"""

from __future__ import annotations

from typing import Any

from kernel.session.state import State


def append_entry(
    state: State,
    *,
    conversation: str,
    role: str,
    kind: str,
    text: str | None,
    content_ref: str | None,
    data: dict[str, Any] | None,
    submission_id: str | None,
    at: str,
) -> list[dict[str, Any]]:
    """Append one validated entry to ``state`` (a working copy); return its change items."""
    items: list[dict[str, Any]] = []
    if conversation not in state["conversations"]:
        state["conversations"][conversation] = {"id": conversation, "created_at": at}
        items.append({"type": "conversation", "id": conversation})
    n = last_entry_number(state) + 1
    state["entries"].append(
        {
            "n": n,
            "conversation": conversation,
            "role": role,
            "kind": kind,
            "text": text,
            "content_ref": content_ref,
            "data": data,
            "submission_id": submission_id,
            "at": at,
        }
    )
    items.append(
        {"type": "entry", "n": n, "conversation": conversation, "role": role, "kind": kind}
    )
    return items


def last_entry_number(state: State) -> int:
    """The last entry's ``n`` (0 for none), wherever it is: the head's tail or a sealed page."""
    if state["entries"]:
        return int(state["entries"][-1]["n"])
    sealed = state.get("pages", {}).get("entries") or []
    return int(sealed[-1]["last"]) if sealed else 0
