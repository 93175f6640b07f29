"""Sealed pages: the session's history moved out of its head into immutable pages. Pure.

The session entity's state is a small **head** that every operation reads and the host writes
whole. What only grows - entries, change records, document history rows, finished submissions
with their task records - lives in the head only while it is recent. ``seal`` moves the
oldest of it into **pages**: canonical JSON texts addressed by ``content_ref`` (sha256), so a
page's reference is known before it is stored. ``seal`` is pure: it returns the new head and
the page texts to store; the entity shell stores them (content-addressed, idempotent, durable
before ``put`` returns) and only then sets the head that references them. A crash between the
two leaves an orphan page, which is harmless.

The head lists every page of each log in ``state["pages"][log]`` as ``{first, last, count,
ref}`` (``first`` / ``last``: the entry number, cursor or acceptance entry of the page's first
and last record). Readers take a ``load(ref) -> dict`` callable (the content store behind a
cache: pages never change) and walk the directory, then the head's tail.

Sealing rules (``page_size`` = P, from the entity's settings, at least 2):
* entries, changes and document history rows: when the head holds 2P records of a log, the
  oldest P become one page, so the head keeps P..2P-1 of each;
* submissions: a final submission whose task subtree is terminal is *settled*; when the head
  holds 2S settled ones (S = max(1, P // 8)), the oldest S (in acceptance order) become one
  page together with their task records. Active and queued submissions, and any submission
  with a non-terminal task, stay in the head.
"""

from __future__ import annotations

import json
from bisect import bisect_left
from collections.abc import Callable, Iterator
from typing import Any

from kernel.content import content_ref
from kernel.errors import CursorExpiredError

State = dict[str, Any]
Loader = Callable[[str], dict[str, Any]]

DEFAULT_PAGE_SIZE = 32
LOGS = ("entries", "changes", "document_history", "submissions")
_KEY = {"entries": "n", "changes": "cursor", "document_history": "cursor"}
_FINAL = frozenset({"completed", "failed", "cancelled"})
_TERMINAL = frozenset({"completed", "failed", "cancelled", "interrupted"})


def empty_directory() -> dict[str, list[dict[str, Any]]]:
    return {log: [] for log in LOGS}


def page_text(log: str, session_id: str, records: list[Any]) -> str:
    """The canonical text of a page: equal records give the equal text, hence the equal ref."""
    body = {"log": log, "session_id": session_id, "records": records}
    return json.dumps(body, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def submission_page_size(page_size: int) -> int:
    return max(1, page_size // 8)


def needs_seal(state: State, page_size: int) -> bool:
    return any(len(state[log]) >= 2 * page_size for log in _KEY) or (
        len(_settled(state)) >= 2 * submission_page_size(page_size)
    )


def seal(state: State, page_size: int = DEFAULT_PAGE_SIZE) -> tuple[State, dict[str, str]]:
    """Move what is old out of the head: ``(new head, {ref: page text})``.

    Returns ``state`` itself and no pages when nothing is due. Never mutates ``state``.
    """
    size = max(2, int(page_size))
    if not needs_seal(state, size):
        return state, {}
    head = json.loads(json.dumps(state))
    pages: dict[str, str] = {}
    for log, key in _KEY.items():
        while len(head[log]) >= 2 * size:
            records, head[log] = head[log][:size], head[log][size:]
            _add_page(head, pages, log, records, records[0][key], records[-1][key])
    _seal_submissions(head, pages, submission_page_size(size))
    return head, pages


def _add_page(
    head: State, pages: dict[str, str], log: str, records: list[Any], first: int, last: int
) -> None:
    text = page_text(log, head["session_id"], records)
    ref = content_ref(text)
    pages[ref] = text
    head["pages"][log].append({"first": first, "last": last, "count": len(records), "ref": ref})


def _roots(tasks: dict[str, Any]) -> dict[str, str]:
    """Task id -> the id of its root task (parents are in the same head, see ``seal``)."""
    roots: dict[str, str] = {}
    for task_id in tasks:
        chain = []
        current = task_id
        while current not in roots:
            chain.append(current)
            parent = tasks.get(current, {}).get("parent")
            if parent is None or parent not in tasks:
                roots[current] = current
                break
            current = parent
        root = roots[current]
        for item in chain:
            roots[item] = root
    return roots


def _settled(state: State) -> list[dict[str, Any]]:
    """Final submissions whose every task is terminal, oldest first."""
    final = [s for s in state["submissions"].values() if s["status"] in _FINAL]
    if not final:
        return []
    tasks = state["tasks"]
    roots = _roots(tasks)
    open_roots = {roots[t] for t, task in tasks.items() if task["status"] not in _TERMINAL}
    settled = [s for s in final if s["turn_instance_id"] not in open_roots]
    return sorted(settled, key=lambda s: s["entry"])


def _seal_submissions(head: State, pages: dict[str, str], per_page: int) -> None:
    settled = _settled(head)
    if len(settled) < 2 * per_page:
        return
    roots = _roots(head["tasks"])
    members: dict[str, list[str]] = {}
    for task_id, root in roots.items():
        members.setdefault(root, []).append(task_id)
    while len(settled) >= 2 * per_page:
        batch, settled = settled[:per_page], settled[per_page:]
        records = []
        for sub in batch:
            owned = sorted(members.get(sub["turn_instance_id"], []))
            records.append({"submission": sub, "tasks": {t: head["tasks"][t] for t in owned}})
            for task_id in owned:
                del head["tasks"][task_id]
            del head["submissions"][sub["id"]]
        head["counts"]["sealed_submissions"] += len(batch)
        _add_page(head, pages, "submissions", records, batch[0]["entry"], batch[-1]["entry"])


# --- reading across pages ------------------------------------------------------------------


def _page_records(load: Loader, ref: str, log: str) -> list[Any]:
    page = load(ref)
    if not isinstance(page, dict) or page.get("log") != log:
        raise ValueError(f"content {ref} is not a {log} page")
    records: list[Any] = page["records"]
    return records


def records_after(
    state: State, log: str, after: int, limit: int, load: Loader | None
) -> list[dict[str, Any]]:
    """Up to ``limit`` records of ``log`` whose key is > ``after``, oldest first (copies)."""
    key = _KEY[log]
    found: list[dict[str, Any]] = []
    directory = state["pages"][log]
    start = bisect_left([p["last"] for p in directory], after + 1)
    for page in directory[start:]:
        if load is None:
            raise CursorExpiredError(
                "cursor_expired",
                f"{log} up to {page['last']} are in sealed pages: read them through the API",
                "after",
            )
        for record in _page_records(load, page["ref"], log):
            if record[key] > after:
                found.append(record)
                if len(found) >= limit:
                    return json.loads(json.dumps(found))
    for record in state[log]:
        if record[key] > after:
            found.append(record)
            if len(found) >= limit:
                break
    return json.loads(json.dumps(found))


def iter_records(state: State, log: str, load: Loader | None) -> Iterator[dict[str, Any]]:
    """Every record of ``log``, oldest first: the pages, then the head's tail (not copies)."""
    for page in state["pages"][log]:
        if load is None:
            raise ValueError("reading sealed pages needs a loader")
        yield from _page_records(load, page["ref"], log)
    if log != "submissions":
        yield from state[log]


def sealed_submission(state: State, sub_id: str, load: Loader) -> dict[str, Any] | None:
    """The sealed record ``{submission, tasks}`` of a submission, newest pages first."""
    for page in reversed(state["pages"]["submissions"]):
        for record in _page_records(load, page["ref"], "submissions"):
            if record["submission"]["id"] == sub_id:
                return json.loads(json.dumps(record))
    return None


def sealed_submission_ids(state: State, load: Loader) -> list[str]:
    return [r["submission"]["id"] for r in iter_records(state, "submissions", load)]


def submission_marker(state: State, sub_id: str) -> str:
    """The text whose presence in the content store says "this session sealed ``sub_id``".

    It names the session's incarnation (``created_at``), so a session deleted and created
    again under the same id does not inherit the markers of the old one.
    """
    return f"session-submission-sealed\n{state['session_id']}\n{state['created_at']}\n{sub_id}\n"
