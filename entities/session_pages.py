"""IO for the session's sealed pages (``kernel.session.pages``): store them, load them, read the head.

* ``store_pages`` writes page texts to the content store. The store is content-addressed and
  durable before ``put`` returns, so the entity calls it *before* it sets the head that
  references the pages; a crash in between leaves only orphan pages.
* ``load_page`` reads a page through a small in-process cache: a page never changes (its
  reference is its hash), so a cached copy is always right. Callers must not mutate it;
  ``kernel.session.pages`` readers return copies.
* ``read_head`` reads a session entity's state (the head) through the durable client;
  ``stop_reason`` reads from it why a submission's waits should stop (cancelled or ended).
* ``page_size`` is the setting ``AGENT_SESSION_PAGE_SIZE`` (records per sealed page, default
  32, at least 2): tests lower it to seal pages after a few turns.
"""

from __future__ import annotations

import json
import os
import threading
from collections import OrderedDict
from typing import Any

import azure.durable_functions as df

from adapters.content_store import ContentNotFound, default_store
from kernel.common.content import content_ref
from kernel.common.statuses import FINAL_SUBMISSION_STATUSES
from kernel.session import pages
from kernel.session import reducer as session_core
from kernel.session.pages import DEFAULT_PAGE_SIZE
from kernel.session.state import decode_entity_state

CACHE_PAGES = 1024  # ~40 MB at most: a page holds 32 records of a few hundred bytes
_cache: OrderedDict[str, dict[str, Any]] = OrderedDict()
_lock = threading.Lock()


def page_size() -> int:
    raw = os.environ.get("AGENT_SESSION_PAGE_SIZE", "")
    try:
        return max(2, int(raw)) if raw.strip() else DEFAULT_PAGE_SIZE
    except ValueError:
        return DEFAULT_PAGE_SIZE


def store_pages(pages: dict[str, str]) -> None:
    store = default_store()
    for ref, text in pages.items():
        stored = store.put(text)
        if stored != ref:  # the kernel and the store hash the same bytes; anything else is a bug
            raise RuntimeError(f"content store answered {stored} for page {ref}")


def load_page(ref: str) -> dict[str, Any]:
    with _lock:
        page = _cache.get(ref)
        if page is not None:
            _cache.move_to_end(ref)
            return page
    page = json.loads(default_store().get(ref))
    if not isinstance(page, dict):
        raise TypeError(f"content {ref} is not a page")
    with _lock:
        _cache[ref] = page
        while len(_cache) > CACHE_PAGES:
            _cache.popitem(last=False)
    return page


def has_content(text: str) -> bool:
    try:
        default_store().get(content_ref(text))
    except ContentNotFound:
        return False
    return True


def sealed_submission(state: dict[str, Any] | None, sub_id: str) -> dict[str, Any] | None:
    """The sealed record ``{submission, tasks}`` of ``sub_id``, or None. A submission the session
    never sealed costs one content-store lookup (its marker), not a scan of the pages."""
    if state is None or not (state.get("counts") or {}).get("sealed_submissions"):
        return None
    if not has_content(pages.submission_marker(state, sub_id)):
        return None
    return pages.sealed_submission(state, sub_id, load_page)


def document(state: dict[str, Any] | None, doc_id: str) -> dict[str, Any] | None:
    """A document's latest record: the head's, else its bucket page's (``kernel.session.pages``)."""
    if state is None:
        return None
    held = (state.get("documents") or {}).get(doc_id)
    if held is not None or not state.get("document_buckets"):
        return held
    return pages.sealed_document(state, doc_id, load_page)


async def read_head(
    client: df.DurableOrchestrationClient, session_id: str
) -> dict[str, Any] | None:
    return decode_entity_state(await client.read_entity_state(df.EntityId("session", session_id)))


async def stop_reason(
    client: df.DurableOrchestrationClient, session_id: str, submission_id: str
) -> str | None:
    """Why a wait of the submission (a background model call, an MCP task) should stop: a
    cancel was requested, or the submission is already final (finished by someone else);
    None to go on."""
    head = await read_head(client, session_id)
    if head is None:
        return None
    sub = session_core.upgrade(head)["submissions"].get(submission_id)
    if sub is None:
        return None
    if sub.get("cancel_requested_at"):
        return str(sub.get("cancel_reason") or "cancel requested")
    if sub.get("status") in FINAL_SUBMISSION_STATUSES:
        return f"the submission is already {sub['status']}"
    return None
