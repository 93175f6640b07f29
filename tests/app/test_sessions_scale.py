"""A long session end to end: with a small page size a few turns seal several pages, and the
change stream, the paged entries, sealed submissions and delete still see everything.

``AGENT_SESSION_PAGE_SIZE=4`` makes the entity seal a page every four entries or change records
and every submission once settled, so eight turns seal dozens of pages on any store.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from kernel.turn import tools
from tests.app.conftest import kernel_env
from tests.app.turn_support import submit, wait_final
from tests.harness import ROOT, WEBHOOK, HostProcess, store_spec_for, store_specs

SESSION = "long"
TURNS = 8
# The module fixture builds the long session in setup: eight Azure turns can pass the default
# 120 s on a loaded machine, and the timeout is there to catch hangs, not slowness.
pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module", params=store_specs())
def long_session(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[HostProcess, list[str]]]:
    tmp = tmp_path_factory.mktemp("long")
    env = kernel_env(tmp, {"AGENT_SESSION_PAGE_SIZE": "4"})
    host = HostProcess(ROOT, store_spec_for(str(request.param), tmp, "kernel"), env=env).start()
    subs = []
    try:
        for i in range(1, TURNS + 1):
            text = f"calculate {i} * 2 and then remember n{i}: value {i}"
            sub = submit(host, SESSION, text, request_id=f"r{i}")
            assert wait_final(host, SESSION, sub, timeout=60)["status"] == "completed"
            subs.append(sub)
        yield host, subs
    finally:
        host.kill()


def get(host: HostProcess, path: str) -> Any:
    response = host.get(path)
    assert response.status == 200, response.body
    return response.json()


def test_the_head_is_small_and_counts_what_was_sealed(long_session: Any) -> None:
    host, subs = long_session
    view = get(host, f"/api/sessions/{SESSION}")

    sealed = view["counts"]["sealed"]
    assert sealed["entries"] > 0 and sealed["changes"] > 0 and sealed["submissions"] > 0
    assert len(view["entries"]) < 8 and view["counts"]["entries"] == view["entries"][-1]["n"]
    # Each turn remembers one document and records the environment it ran in (one more).
    assert view["counts"]["submissions"] == TURNS and view["counts"]["documents"] == 2 * TURNS
    assert subs[0] not in view["submissions"]
    assert view["links"]["entries"].endswith(f"/api/sessions/{SESSION}/entries?after=0")


def test_the_change_stream_from_zero_yields_every_change_once_in_order(long_session: Any) -> None:
    host, _ = long_session
    latest = get(host, f"/api/sessions/{SESSION}")["cursor"]

    for limit in ("", "&limit=7"):
        seen: list[int] = []
        after = 0
        while after < latest:
            page = get(host, f"/api/sessions/{SESSION}/changes?after={after}{limit}")
            assert page["changes"], page
            seen += [record["cursor"] for record in page["changes"]]
            after = page["cursor"]
        assert seen == list(range(1, latest + 1))


def test_the_entries_api_pages_through_every_entry(long_session: Any) -> None:
    host, subs = long_session
    body = get(host, f"/api/sessions/{SESSION}/entries?after=0&limit=5")
    last = body["latest"]
    seen = [e["n"] for e in body["entries"]]
    while body["next"] is not None:
        body = get(host, "/api" + body["next"].split("/api", 1)[1])
        seen += [e["n"] for e in body["entries"]]

    assert seen == list(range(1, last + 1)) and body["cursor"] == last
    everything = get(host, f"/api/sessions/{SESSION}/entries?after=0")["entries"]
    users = [e for e in everything if e["role"] == "user"]
    assert [e["submission_id"] for e in users] == subs


@pytest.mark.parametrize(
    ("query", "code", "field"),
    [
        ("", "invalid_cursor", "after"),
        ("?after=x", "invalid_cursor", "after"),
        ("?after=-1", "invalid_cursor", "after"),
        ("?after=1.5", "invalid_cursor", "after"),
        ("?after=99999", "invalid_cursor", "after"),
        ("?after=0&limit=0", "invalid_limit", "limit"),
        ("?after=0&limit=1000000", "invalid_limit", "limit"),
        ("?after=0&limit=ten", "invalid_limit", "limit"),
    ],
)
def test_bad_entries_queries_are_400_naming_the_field(
    long_session: Any, query: str, code: str, field: str
) -> None:
    host, _ = long_session
    response = host.get(f"/api/sessions/{SESSION}/entries{query}")

    assert response.status == 400
    assert response.json() == {"error": code, "message": response.json()["message"], "field": field}


def test_unknown_session_entries_are_404(long_session: Any) -> None:
    host, _ = long_session
    assert host.get("/api/sessions/nobody/entries?after=0").status == 404


def test_a_sealed_submission_is_readable_and_a_retry_is_a_duplicate(long_session: Any) -> None:
    host, subs = long_session
    first = get(host, f"/api/sessions/{SESSION}/submissions/{subs[0]}")
    assert first["status"] == "completed" and first["position"] is None and first["answer"]

    retry = host.post(
        f"/api/sessions/{SESSION}/submissions", {"requestId": "r1", "text": "anything"}
    )
    assert retry.status == 202 and retry.json()["duplicate"] is True
    assert retry.json()["submissionId"] == subs[0]


def test_a_tool_reads_a_note_sealed_into_a_bucket_page(long_session: Any) -> None:
    host, _ = long_session
    assert tools.note_document_id("n1") not in get(host, f"/api/sessions/{SESSION}")["documents"]

    sub = submit(host, SESSION, "recall n1", request_id="recall")
    final = wait_final(host, SESSION, sub, timeout=60)

    assert final["status"] == "completed" and "value 1" in final["answer"], final


def test_delete_purges_the_instances_of_sealed_submissions_too(long_session: Any) -> None:
    host, subs = long_session
    assert host.get(f"{WEBHOOK}/instances?instanceIdPrefix={subs[0]}:").json()

    response = host.request("DELETE", f"/api/sessions/{SESSION}")

    assert response.status == 200, response.body
    for sub in subs:
        assert host.get(f"{WEBHOOK}/instances?instanceIdPrefix={sub}:").json() == []
    assert host.get(f"/api/sessions/{SESSION}").status == 404
