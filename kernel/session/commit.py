"""``commit``: one atomic change of entries, documents, tasks and a submission. Pure reducer.

Request: ``{submission_id?, entries: [...], documents: [{id, type, data, expected_version?}],
tasks: [{id, ...fields}], submission: {id?, status?, answer?}}`` (shapes in
``kernel.session.requests``). Result: ``{cursor, entry_numbers, document_versions,
next_submission_id}``.

Contract:
* All or nothing: the parts are applied in the order entries, documents, tasks, submission to
  a working copy; the first failure raises and the copy is dropped, so the input state is
  unchanged (``json.dumps``-equal) and nothing is logged.
* On success ``cursor`` goes up by exactly one and one change record lists every item.
* Entries written for a submission (``submission_id``) carry its id. A submission that is
  already final cannot be written for: ``ConflictError("submission_finished")``, which fences
  off a late writer after a cancellation.
* ``submission.status`` (completed | failed | cancelled) finishes the submission exactly as
  ``finish`` does, handing the turn to the next queued submission, whose id is returned as
  ``next_submission_id`` so the caller can raise its hand-over event.
"""

from __future__ import annotations

from typing import Any

from kernel.common.errors import ConflictError
from kernel.common.statuses import FINAL_SUBMISSION_STATUSES
from kernel.session.changes import record_change
from kernel.session.documents import delete_document, put_document
from kernel.session.entries import append_entry
from kernel.session.requests import CommitRequest, SubmissionPatch, parse
from kernel.session.state import State, upgrade, validate_timestamp, working_copy
from kernel.session.submissions import find_submission, finish_submission, submission_item
from kernel.session.tasks import upsert_task


def commit(state: State, request: object, now: str) -> tuple[State, dict[str, Any]]:
    at = validate_timestamp(now)
    req = parse(CommitRequest, request)
    new = working_copy(upgrade(state))
    sub_id = req.target_submission()
    if sub_id is not None:
        _check_open(new, sub_id, "submission.id" if req.submission_id is None else "submission_id")
    items: list[dict[str, Any]] = []
    entry_numbers = _append_entries(new, req, sub_id, at, items)
    document_versions = _put_documents(new, req, at, items)
    for i, patch in enumerate(req.tasks):
        items.append(upsert_task(new, patch, at=at, field=f"tasks[{i}]"))
    following = None
    if req.submission is not None and sub_id is not None:
        items += _apply_submission(new, sub_id, req.submission, at=at)
        following = new["submissions"][sub_id]["next_submission_id"]
    cursor = record_change(new, op="commit", at=at, items=items)
    return new, {
        "cursor": cursor,
        "entry_numbers": entry_numbers,
        "document_versions": document_versions,
        "next_submission_id": following,
    }


def _append_entries(
    state: State, req: CommitRequest, sub_id: str | None, at: str, items: list[dict[str, Any]]
) -> list[int]:
    numbers: list[int] = []
    for entry in req.entries:
        items += append_entry(
            state, conversation=entry.conversation, role=entry.role, kind=entry.kind,
            text=entry.text, content_ref=entry.content_ref, data=entry.data,
            submission_id=sub_id, at=at,
        )  # fmt: skip
        numbers.append(state["entries"][-1]["n"])
    return numbers


def _put_documents(
    state: State, req: CommitRequest, at: str, items: list[dict[str, Any]]
) -> dict[str, int]:
    versions: dict[str, int] = {}
    for i, doc in enumerate(req.documents):
        if doc.delete:
            item = delete_document(
                state, doc_id=doc.id, doc_type=doc.type, expected_version=doc.expected_version,
                at=at, field=f"documents[{i}]",
            )  # fmt: skip
        else:
            item = put_document(
                state, doc_id=doc.id, doc_type=doc.type, data=doc.data,
                expected_version=doc.expected_version, at=at, field=f"documents[{i}]",
            )  # fmt: skip
        versions[doc.id] = item["version"]
        items.append(item)
    return versions


def _check_open(state: State, sub_id: str, field: str) -> None:
    sub = find_submission(state, sub_id, field)
    if sub["status"] in FINAL_SUBMISSION_STATUSES:
        raise ConflictError(
            "submission_finished", f"submission {sub_id!r} is already {sub['status']}", field
        )


def _apply_submission(
    state: State, sub_id: str, patch: SubmissionPatch, *, at: str
) -> list[dict[str, Any]]:
    if patch.status is not None:
        return finish_submission(
            state, sub_id, patch.status, patch.answer, at=at, field="submission.status"
        )
    sub = state["submissions"][sub_id]
    if patch.answer is not None:
        sub["answer"] = patch.answer
    return [submission_item(sub)]
