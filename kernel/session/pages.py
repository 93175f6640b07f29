"""Sealed pages: the session's history moved out of its head into immutable pages. Pure.

The session entity's state is a small **head** that every operation reads and the host writes
whole. What only grows - entries, change records, document history rows, finished submissions
with their task records - lives in the head only while it is recent. ``seal`` moves the
oldest of it into **pages**: canonical JSON texts addressed by ``content_ref`` (sha256), so a
page's reference is known before it is stored. ``seal`` is pure: it returns the new head and
the page texts to store; the entity shell stores them (content-addressed, idempotent, durable
before ``put`` returns) and only then sets the head that references them. A crash between the
two leaves an orphan page, which is harmless.

The head's directory ``state["pages"][log]`` lists each log's pages, oldest first, as
``{first, last, count, level, ref}`` (``first`` / ``last``: the entry number, cursor or
acceptance entry of the first and last record below it). A level-0 item is a page of records;
a level-k item is an *index page* listing ``F`` items of level k-1 (``FANOUT``). When a
directory holds ``2F`` items of one level, the oldest ``F`` of them are sealed into one item of
the next level, so a directory holds fewer than ``2F`` items per level and its size grows with
the logarithm of the session, not with the session. Readers take a ``load(ref) -> dict``
callable (the content store behind a cache: pages never change), walk the directory (one page
per level to reach a record), then the head's tail.

Sealing rules (``page_size`` = P, from the entity's settings, at least 2):
* entries, changes and document history rows: when the head holds 2P records of a log, the
  oldest P become one page, so the head keeps P..2P-1 of each;
* submissions: a final submission whose task subtree is terminal is *settled*; when the head
  holds 2S settled ones (S = max(1, P // 8)), the oldest S (in acceptance order) become one
  page together with their task records. Active and queued submissions, and any submission
  with a non-terminal task, stay in the head.
* documents: when the head holds 2P documents, all but the P most recently written move into
  ``DOCUMENT_BUCKETS`` bucket pages by a hash of their id (``document_bucket``); a bucket page
  maps id -> record and is rewritten (as a new page) when documents join it. The head lists
  ``document_buckets`` ``{bucket: {ref, count}}``. A document in the head shadows its older
  copy in a bucket. This needs the current bucket pages, so ``seal`` takes ``load`` (pages are
  immutable and addressed by their hash, so reading them keeps ``seal`` deterministic); without
  it documents stay in the head. Before a commit, the entity puts the documents it names back
  into the head (``with_documents``), so the reducers see every document they check.
* finished parts of a long turn: a subtree of tasks hanging off a turn task (a round with its
  model call and tool tasks) whose every task is terminal is *done*; when the head holds 2R done
  subtrees (R = max(1, P // 4)), the oldest R become one ``tasks`` page (records ``{seq,
  root, tasks}``), so a turn of 1,000 rounds keeps only its recent rounds in the head. The turn
  task's ``children`` still lists them.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from typing import Any

from kernel.common.content import content_ref
from kernel.common.errors import CursorExpiredError
from kernel.common.statuses import FINAL_SUBMISSION_STATUSES, TERMINAL_TASK_STATUSES

State = dict[str, Any]
Loader = Callable[[str], dict[str, Any]]

DEFAULT_PAGE_SIZE = 32
FANOUT = 8
DOCUMENT_BUCKETS = 32
LOGS = ("entries", "changes", "document_history", "submissions", "tasks")
_KEY = {"entries": "n", "changes": "cursor", "document_history": "cursor"}


def empty_directory() -> dict[str, list[dict[str, Any]]]:
    return {log: [] for log in LOGS}


def page_text(log: str, session_id: str, records: Any) -> str:
    """The canonical text of a page: equal records give the equal text, hence the equal ref."""
    body = {"log": log, "session_id": session_id, "records": records}
    return json.dumps(body, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def submission_page_size(page_size: int) -> int:
    return max(1, page_size // 8)


def task_page_size(page_size: int) -> int:
    return max(1, page_size // 4)


def needs_seal(state: State, page_size: int, load: Loader | None = None) -> bool:
    return (
        any(len(state[log]) >= 2 * page_size for log in _KEY)
        or (load is not None and len(state["documents"]) >= 2 * page_size)
        or len(_settled(state)) >= 2 * submission_page_size(page_size)
        or len(_done_subtrees(state)) >= 2 * task_page_size(page_size)
    )


def seal(
    state: State, page_size: int = DEFAULT_PAGE_SIZE, load: Loader | None = None
) -> tuple[State, dict[str, str]]:
    """Move what is old out of the head: ``(new head, {ref: page text})``.

    Returns ``state`` itself and no pages when nothing is due. Never mutates ``state``.
    ``load`` reads existing pages (needed to move documents into their bucket pages).
    """
    size = max(2, int(page_size))
    if not needs_seal(state, size, load):
        return state, {}
    head = json.loads(json.dumps(state))
    pages: dict[str, str] = {}
    for log, key in _KEY.items():
        while len(head[log]) >= 2 * size:
            records, head[log] = head[log][:size], head[log][size:]
            _add_page(head, pages, log, records, records[0][key], records[-1][key])
    _seal_submissions(head, pages, submission_page_size(size))
    _seal_subtrees(head, pages, task_page_size(size))
    if load is not None:
        _seal_documents(head, pages, size, load)
    return head, pages


def document_bucket(doc_id: str) -> str:
    digest = hashlib.sha256(doc_id.encode("utf-8")).digest()
    return str(int.from_bytes(digest[:4], "big") % DOCUMENT_BUCKETS)


def _seal_documents(head: State, pages: dict[str, str], keep: int, load: Loader) -> None:
    docs = head["documents"]
    if len(docs) < 2 * keep:
        return
    by_age = sorted(docs, key=lambda d: (docs[d]["updated_at"], d))
    moving: dict[str, list[str]] = {}
    for doc_id in by_age[: len(docs) - keep]:
        moving.setdefault(document_bucket(doc_id), []).append(doc_id)
    buckets = head["document_buckets"]
    for bucket, doc_ids in sorted(moving.items()):
        item = buckets.get(bucket)
        records: dict[str, Any] = {}
        if item is not None:
            records.update(_bucket_records(load, item["ref"]))
        for doc_id in doc_ids:
            records[doc_id] = docs.pop(doc_id)
        text = page_text("documents", head["session_id"], records)
        ref = content_ref(text)
        pages[ref] = text
        buckets[bucket] = {"ref": ref, "count": len(records)}


def _bucket_records(load: Loader, ref: str) -> dict[str, Any]:
    page = load(ref)
    if not isinstance(page, dict) or page.get("log") != "documents":
        raise ValueError(f"content {ref} is not a documents page")
    records: dict[str, Any] = page["records"]
    return records


def sealed_document(state: State, doc_id: str, load: Loader) -> dict[str, Any] | None:
    """A document's record from its bucket page (the head's copy, if any, is newer)."""
    item = (state.get("document_buckets") or {}).get(document_bucket(doc_id))
    if item is None:
        return None
    record = _bucket_records(load, item["ref"]).get(doc_id)
    return None if record is None else json.loads(json.dumps(record))


def with_documents(state: State, doc_ids: list[str], load: Loader) -> State:
    """``state`` with the named documents that only a bucket holds put back into the head
    (a copy; ``state`` itself when there is nothing to put back)."""
    found = {}
    for doc_id in doc_ids:
        if doc_id in state["documents"] or doc_id in found:
            continue
        record = sealed_document(state, doc_id, load)
        if record is not None:
            found[doc_id] = record
    if not found:
        return state
    return {**state, "documents": {**state["documents"], **found}}


def _add_page(
    head: State, pages: dict[str, str], log: str, records: list[Any], first: int, last: int
) -> None:
    text = page_text(log, head["session_id"], records)
    ref = content_ref(text)
    pages[ref] = text
    directory = head["pages"][log]
    directory.append({"first": first, "last": last, "count": len(records), "level": 0, "ref": ref})
    _fold(head["session_id"], log, directory, pages)


def _fold(
    session_id: str, log: str, directory: list[dict[str, Any]], pages: dict[str, str]
) -> None:
    """Seal the oldest ``FANOUT`` items of any level that has ``2 * FANOUT`` into one index page
    of the next level. Levels only decrease along the directory, so it stays in key order."""
    level = 0
    while True:
        at = [i for i, item in enumerate(directory) if item.get("level", 0) == level]
        if not at:
            return
        if len(at) >= 2 * FANOUT:
            children = [directory[i] for i in at[:FANOUT]]
            text = page_text(f"{log}/index", session_id, children)
            ref = content_ref(text)
            pages[ref] = text
            item = {
                "first": children[0]["first"], "last": children[-1]["last"],
                "count": sum(c["count"] for c in children), "level": level + 1, "ref": ref,
            }  # fmt: skip
            directory[at[0] : at[FANOUT - 1] + 1] = [item]
        level += 1


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
    final = [s for s in state["submissions"].values() if s["status"] in FINAL_SUBMISSION_STATUSES]
    if not final:
        return []
    tasks = state["tasks"]
    roots = _roots(tasks)
    open_roots = {
        roots[t] for t, task in tasks.items() if task["status"] not in TERMINAL_TASK_STATUSES
    }
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


def _done_subtrees(state: State) -> list[list[str]]:
    """Terminal subtrees hanging off turn tasks, oldest first: ``[[root, *descendants]]``."""
    tasks = state["tasks"]
    done: list[list[str]] = []
    for turn in tasks.values():
        if turn["kind"] != "turn" or turn["parent"] is not None:
            continue
        for child in turn["children"]:
            members = _subtree(tasks, child)
            if members and all(tasks[t]["status"] in TERMINAL_TASK_STATUSES for t in members):
                done.append(members)
    return done


def _subtree(tasks: dict[str, Any], root: str) -> list[str]:
    if root not in tasks:
        return []  # sealed already
    members, stack = [], [root]
    while stack:
        current = stack.pop()
        if current in tasks:
            members.append(current)
            stack.extend(reversed(tasks[current]["children"]))
    return members


def _seal_subtrees(head: State, pages: dict[str, str], per_page: int) -> None:
    done = _done_subtrees(head)
    if len(done) < 2 * per_page:
        return
    seq = head["counts"].get("sealed_task_trees", 0)
    while len(done) >= 2 * per_page:
        batch, done = done[:per_page], done[per_page:]
        records = []
        for members in batch:
            seq += 1
            records.append(
                {
                    "seq": seq,
                    "root": members[0],
                    "tasks": {t: head["tasks"].pop(t) for t in members},
                }
            )
        _add_page(head, pages, "tasks", records, records[0]["seq"], records[-1]["seq"])
    head["counts"]["sealed_task_trees"] = seq


# --- reading across pages ------------------------------------------------------------------


def _page_records(load: Loader, ref: str, log: str) -> list[Any]:
    page = load(ref)
    if not isinstance(page, dict) or page.get("log") != log:
        raise ValueError(f"content {ref} is not a {log} page")
    records: list[Any] = page["records"]
    return records


def _leaves(
    items: list[dict[str, Any]], log: str, after: int, load: Loader | None, reverse: bool = False
) -> Iterator[list[Any]]:
    """The records of each level-0 page below ``items`` holding a key > ``after``, in key
    order (``reverse``: newest page first)."""
    ordered = reversed(items) if reverse else items
    for item in ordered:
        if item["last"] <= after:
            continue
        if load is None:
            raise CursorExpiredError(
                "cursor_expired",
                f"{log} up to {item['last']} are in sealed pages: read them through the API",
                "after",
            )
        if item.get("level", 0) == 0:
            yield _page_records(load, item["ref"], log)
        else:
            yield from _leaves(
                _page_records(load, item["ref"], f"{log}/index"), log, after, load, reverse
            )


def records_after(
    state: State, log: str, after: int, limit: int, load: Loader | None
) -> list[dict[str, Any]]:
    """Up to ``limit`` records of ``log`` whose key is > ``after``, oldest first (copies)."""
    key = _KEY[log]
    found: list[dict[str, Any]] = []
    for records in _leaves(state["pages"][log], log, after, load):
        for record in records:
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
    """Every record of ``log``, oldest first: the pages, then the head's tail (not copies).

    For ``submissions`` and ``tasks`` only the sealed records: the head's are its own maps."""
    for records in _leaves(state["pages"][log], log, -1, load):
        yield from records
    if log in _KEY:
        yield from state[log]


def sealed_submission(state: State, sub_id: str, load: Loader) -> dict[str, Any] | None:
    """The sealed record ``{submission, tasks}`` of a submission, newest pages first."""
    for records in _leaves(state["pages"]["submissions"], "submissions", -1, load, reverse=True):
        for record in records:
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
