"""The app behind keys (``--auth keys`` on loopback): route levels, owners, approval links, secrets.

One host per module runs the kernel app with fixed master and function keys, principals
trusted (``AGENT_TRUST_CLIENT_PRINCIPAL=1``), a real mail service with an API key, and an
approver: every approval mails its links there, and the tests read them back from it.
"""

from __future__ import annotations

import json
import re
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kernel.common import ids
from kernel.turn import tools
from kernel.turn.approval_tokens import token_hash
from services.mailbox.testing import start_mailbox, stop_mailbox
from tests.app.turn_support import turn_env
from tests.harness import ROOT, HostProcess, store_spec_for, store_specs, wait_for

MASTER = "master-key-for-tests-0123456789abcdef"
FUNCTION = "function-key-for-tests-0123456789abcdef"
MAIL_SECRET = "mail-api-key-never-in-history-5f2c7a"
MODEL_SECRET = "model-api-key-never-in-history-9b1e4d"
APPROVER = "approver@example.com"
PLAN = "remember old plan: eggs and then delete document old plan and then recall old plan"
NOTICES = (
    "calculate (17 + 25) * 2 and then send the approved notice to alice@example.com, "
    'bob@example.com, carol@example.com, dave@example.com, erin@example.com subject "Window"'
)
FINAL = ("completed", "failed", "cancelled")
WEBHOOK = "/runtime/webhooks/durabletask"
LINK = re.compile(r"https?://\S+?(/api/approvals/\S+)")


class Keyed:
    """A host and the mail service, with requests that carry a chosen key."""

    def __init__(self, host: HostProcess, mail_url: str) -> None:
        self.host = host
        self.mail_url = mail_url

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        key: str | None = FUNCTION,
        principal: str | None = None,
    ) -> Any:
        headers = {"x-functions-key": key} if key else {}
        if principal:
            headers["X-MS-CLIENT-PRINCIPAL-ID"] = principal
        return self.host.request(method, path, body, headers=headers)

    def submit(self, session: str, text: str, request_id: str = "r1", **kw: Any) -> str:
        response = self.call(
            "POST",
            f"/api/sessions/{session}/submissions",
            {"requestId": request_id, "text": text},
            **kw,
        )
        assert response.status == 202, (response.status, response.body)
        return str(response.json()["submissionId"])

    def status(self, instance_id: str, query: str = "") -> dict[str, Any]:
        response = self.call("GET", f"{WEBHOOK}/instances/{instance_id}{query}", key=MASTER)
        return response.json() if response.status in (200, 202) else {}

    def custom(self, instance_id: str) -> dict[str, Any]:
        custom = self.status(instance_id).get("customStatus")
        return json.loads(custom) if isinstance(custom, str) else (custom or {})

    def wait_phase(self, instance_id: str, phase: str) -> dict[str, Any]:
        """The custom status once in ``phase`` (for approval: once its links are issued)."""

        def reached() -> dict[str, Any] | None:
            custom = self.custom(instance_id)
            return custom if custom.get("phase") == phase and "links" not in custom else None

        return wait_for(reached, 60, f"{instance_id} in phase {phase}")

    def wait_final(self, session: str, sub: str, **kw: Any) -> dict[str, Any]:
        def final() -> dict[str, Any] | None:
            view = self.call("GET", f"/api/sessions/{session}/submissions/{sub}", **kw).json()
            return view if (view or {}).get("status") in FINAL else None

        return wait_for(final, 90, f"submission {sub} to finish", interval=0.1)

    def mails(self) -> list[dict[str, Any]]:
        with urllib.request.urlopen(self.mail_url + "/messages", timeout=10) as response:
            return list(json.loads(response.read())["messages"])

    def links(self, task_id: str) -> dict[str, str]:
        """The approval links mailed for ``task_id``: {decision: path with query}."""

        def mailed() -> dict[str, str] | None:
            found: dict[str, str] = {}
            for mail in self.mails():
                for path in LINK.findall(mail.get("body") or ""):
                    if urllib.parse.quote(task_id, safe=":") in path:
                        decision = urllib.parse.parse_qs(urllib.parse.urlsplit(path).query)
                        found[decision["decision"][0]] = path
            return found if len(found) == 2 else None

        return wait_for(mailed, 30, f"the approval mail of {task_id}")


def token_of(path: str) -> str:
    return urllib.parse.parse_qs(urllib.parse.urlsplit(path).query)["token"][0]


def keyed_host(
    request: pytest.FixtureRequest, kind: str, tmp: Path, mail_url: str, extra: dict[str, str]
) -> HostProcess:
    env = turn_env(
        tmp,
        {
            "DURABLE_HOST_MASTER_KEY": MASTER,
            "DURABLE_HOST_FUNCTION_KEY": FUNCTION,
            "AGENT_TRUST_CLIENT_PRINCIPAL": "1",
            "AGENT_MAIL_BASE_URL": mail_url,
            "AGENT_MAIL_API_KEY": MAIL_SECRET,
            "AGENT_MODEL_API_KEY": MODEL_SECRET,  # no endpoint: the offline planner answers
            "AGENT_APPROVER_EMAIL": APPROVER,
            "AGENT_PUBLIC_URL": "https://agents.example.com",
            "AGENT_NOTICE_RETRY_BACKOFF_S": "0.2",
            **extra,
        },
        kind,
    )
    if kind == "azure":
        from tests.conftest import azure_env

        env = {**azure_env(request, tmp.name), **env}
    host = HostProcess(ROOT, store_spec_for(kind, tmp, "kernel"), env=env, args=["--auth", "keys"])
    return host.start()


@pytest.fixture(scope="module", params=store_specs())
def app(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Keyed]:
    tmp = tmp_path_factory.mktemp("security")
    mail_process, mail_url = start_mailbox(tmp / "mailbox.db")
    host = keyed_host(request, str(request.param), tmp, mail_url, {})
    yield Keyed(host, mail_url)
    host.kill()
    stop_mailbox(mail_process)


# --- levels ---------------------------------------------------------------------------


def test_the_sessions_api_and_page_need_the_function_key(app: Keyed):
    sub = app.submit("levels", "calculate 2 + 3")
    app.wait_final("levels", sub)
    paths = [
        "/api/sessions/levels",
        "/api/sessions/levels/entries?after=0",
        "/api/sessions/levels/changes?after=0",
        f"/api/sessions/levels/submissions/{sub}",
        "/api/sessions/levels/page",
    ]

    refused = [app.call("GET", path, key=None).status for path in paths]
    wrong = [app.call("GET", path, key="not-a-key-" + "x" * 30).status for path in paths]
    by_header = [app.call("GET", path).status for path in paths]
    by_code = [app.call("GET", f"{p}{'&' if '?' in p else '?'}code={FUNCTION}", key=None).status for p in paths]  # fmt: skip
    by_master = [app.call("GET", path, key=MASTER).status for path in paths]
    post = app.call("POST", "/api/sessions/levels/submissions", {"requestId": "r2", "text": "hi"}, key=None)  # fmt: skip
    delete = app.call("DELETE", "/api/sessions/levels", key=None)

    assert refused == wrong == [401] * 5
    assert by_header == by_code == by_master == [200] * 5
    assert (post.status, delete.status) == (401, 401)
    assert app.call("GET", "/api/sessions/levels", key=None).json()  # a JSON refusal body
    assert app.call("GET", "/api/static/session.js", key=None).status == 200


def test_operator_and_approval_routes_need_the_master_key(app: Keyed):
    operator = "/api/sessions/nobody/submissions/s1/operator"
    approval = "/api/sessions/nobody/approvals/s1:tool:1:0"
    body_op = {"requestId": "q1", "action": "abort"}
    body_ap = {"requestId": "q1", "decision": "approve"}

    with_function = [
        app.call("POST", operator, body_op).status,
        app.call("POST", approval, body_ap).status,
    ]
    with_master = [
        app.call("POST", operator, body_op, key=MASTER).status,
        app.call("POST", approval, body_ap, key=MASTER).status,
    ]

    assert with_function == [401, 401]
    assert with_master == [404, 404]  # let in; there is no such turn or task


# --- approvals by link ------------------------------------------------------------------


def test_an_approval_link_works_once_and_only_for_its_task_and_decision(app: Keyed):
    sub = app.submit("linked", PLAN)
    task_id = ids.tool_task_id(sub, 2, 0)
    waiting = app.wait_phase(task_id, "approval")
    links = app.links(task_id)
    approve, reject = links["approve"], links["reject"]
    other_task = approve.replace(urllib.parse.quote(task_id, safe=":"), ids.tool_task_id(sub, 2, 1))
    swapped = approve.replace(token_of(approve), token_of(reject))

    by_function_key = app.call(
        "POST",
        f"/api/sessions/linked/approvals/{task_id}",
        {"requestId": "x", "decision": "approve"},
    )
    no_token = app.call("POST", approve.split("&token=")[0], key=None)
    wrong = app.call("POST", approve.replace(token_of(approve), "A" * 43), key=None)
    refused = [app.call("POST", path, key=None) for path in (swapped, other_task)]
    shown = app.call("GET", approve, key=None)
    still = app.custom(task_id)
    first = app.call("POST", approve, key=None)
    final = app.wait_final("linked", sub)
    again = app.call("POST", approve, key=None)
    late_reject = app.call("POST", reject, key=None)

    assert waiting["notified"] is True and set(waiting["token_hashes"]) == {"approve", "reject"}
    assert by_function_key.status == 401
    assert (no_token.status, no_token.json()["error"]) == (401, "approval_token_required")
    assert (wrong.status, wrong.json()["error"]) == (403, "approval_token_invalid")
    assert [r.status for r in refused] == [403, 403]
    assert shown.status == 200 and b"<form method='post'>" in shown.body
    assert still["phase"] == "approval"  # opening the link decided nothing
    assert (first.status, first.json()["decision"]) == (202, "approve")
    assert final["status"] == "completed"
    assert 'Deleted document "old plan".' in final["answer"]
    assert (again.status, again.json()["error"]) == (403, "approval_token_used")
    assert late_reject.status == 403
    assert app.host.log_path is not None
    logged = app.host.log_path.read_text().count("approval links refused")
    assert 1 <= logged < 6  # six refusals so far, at most one line a minute
    assert app.custom(task_id)["approval"]["decision"] == "approve"
    note = app.call("GET", "/api/sessions/linked").json()["documents"][
        tools.note_document_id("old plan")
    ]
    assert note["deleted"] is True
    view = app.call("GET", "/api/sessions/linked").body.decode()
    assert token_of(approve) not in view and token_of(reject) not in view


def test_the_master_key_decides_once_and_then_the_links_are_refused(app: Keyed):
    sub = app.submit("admin", PLAN)
    task_id = ids.tool_task_id(sub, 2, 0)
    app.wait_phase(task_id, "approval")
    links = app.links(task_id)
    path = f"/api/sessions/admin/approvals/{task_id}"

    decided = app.call("POST", path, {"requestId": "op-1", "decision": "reject"}, key=MASTER)
    link = app.call("POST", links["approve"], key=None)
    final = app.wait_final("admin", sub)

    token = token_of(links["approve"])
    bad_id = app.call("POST", f"/api/approvals/bad%20id?decision=approve&token={token}", key=None)
    bad_decision = app.call("POST", links["approve"].replace("=approve", "=maybe"), key=None)

    assert decided.status == 202
    assert link.status == 403
    assert (bad_id.status, bad_id.json()["error"]) == (403, "approval_token_invalid")
    assert (bad_decision.status, bad_decision.json()["field"]) == (400, "decision")
    assert "rejected" in final["answer"]


def test_an_expired_link_is_refused_and_changes_nothing(
    request: pytest.FixtureRequest, tmp_path: Path, app: Keyed
):
    host = keyed_host(
        request, store_specs()[0], tmp_path, app.mail_url, {"AGENT_APPROVAL_TIMEOUT_S": "1"}
    )
    try:
        short = Keyed(host, app.mail_url)
        sub = short.submit("expiring", PLAN)
        task_id = ids.tool_task_id(sub, 2, 0)
        links = short.links(task_id)
        final = short.wait_final("expiring", sub)
        late = short.call("POST", links["approve"], key=None)
        view = short.call("GET", "/api/sessions/expiring").json()
    finally:
        host.kill()

    assert late.status == 403 and late.json()["error"].startswith("approval_token_")
    assert "timed out" in final["answer"]
    assert view["documents"][tools.note_document_id("old plan")].get("deleted") is not True


# --- principals -------------------------------------------------------------------------


def test_another_principal_gets_404_for_everything_of_a_session(app: Keyed):
    sub = app.submit("owned", "calculate 6 * 7", principal="alice")
    app.wait_final("owned", sub, principal="alice")
    reads = [
        "/api/sessions/owned",
        "/api/sessions/owned/entries?after=0",
        "/api/sessions/owned/changes?after=0",
        f"/api/sessions/owned/submissions/{sub}",
        "/api/sessions/owned/page",
    ]

    alice = [app.call("GET", path, principal="alice").status for path in reads]
    bob = [app.call("GET", path, principal="bob") for path in reads]
    anonymous = [app.call("GET", path).status for path in reads]
    post = app.call("POST", "/api/sessions/owned/submissions", {"requestId": "b1", "text": "hi"}, principal="bob")  # fmt: skip
    retry = app.call("POST", "/api/sessions/owned/submissions", {"requestId": "r1", "text": "x"}, principal="bob")  # fmt: skip
    delete = app.call("DELETE", "/api/sessions/owned", principal="bob")
    missing = app.call("GET", "/api/sessions/never-created", principal="bob")

    assert alice == [200] * 5
    assert [r.status for r in bob] == anonymous == [404] * 5
    assert bob[0].json() == {**missing.json(), "message": "no session 'owned'"}
    assert (post.status, retry.status, delete.status) == (404, 404, 404)
    assert (
        app.call("GET", "/api/sessions/owned", principal="alice").json()["counts"]["submissions"]
        == 1
    )


def test_an_unowned_session_stays_open_to_every_caller_with_the_key(app: Keyed):
    sub = app.submit("shared", "calculate 1 + 1")
    app.wait_final("shared", sub)

    assert app.call("GET", "/api/sessions/shared", principal="bob").status == 200
    assert app.submit("shared", "calculate 2 + 2", "r2", principal="carol")


# --- secrets ----------------------------------------------------------------------------


def every_instance(app: Keyed) -> list[str]:
    found: list[str] = []
    token = None
    for _ in range(100):
        headers = {"x-functions-key": MASTER}
        if token:
            headers["x-ms-continuation-token"] = token
        response = app.host.request("GET", f"{WEBHOOK}/instances?top=200", headers=headers)
        found += [row["instanceId"] for row in response.json()]
        token = response.headers.get("x-ms-continuation-token")
        if not token:
            return found
    raise AssertionError("the instance list did not end")


def test_no_secret_or_token_reaches_a_history_a_status_an_entity_or_the_log(app: Keyed):
    sub = app.submit("secrets", NOTICES)
    app.wait_final("secrets", sub)
    second = app.submit("secrets", PLAN, "r2")
    task_id = ids.tool_task_id(second, 2, 0)
    links = app.links(task_id)  # used at once: the route waits for the hashes if need be
    assert app.call("POST", links["approve"], key=None).status == 202
    done = app.wait_final("secrets", second)
    tokens = [token_of(links["approve"]), token_of(links["reject"])]
    notices = [m for m in app.mails() if m["to"] != APPROVER and m["subject"] == "Window"]  # fmt: skip

    texts = []
    for instance_id in every_instance(app):
        query = "?showHistory=true&showHistoryOutput=true&showInput=true"
        texts.append(json.dumps(app.status(urllib.parse.quote(instance_id, safe="@:"), query)))
    entities = app.call("GET", f"{WEBHOOK}/entities/session?fetchState=true", key=MASTER)
    texts.append(entities.body.decode())
    assert app.host.log_path is not None
    texts.append(app.host.log_path.read_text(errors="replace"))
    everything = "\n".join(texts)

    assert done["status"] == "completed" and len(notices) == 5
    # The scan saw the histories with their outputs: the hashes are there, the tokens are not.
    assert token_hash(task_id, "approve", tokens[0]) in everything
    assert any("send_notices" in t for t in texts) and '"historyEvents"' in everything
    assert json.loads(entities.body) and '"state"' in texts[-2]  # the sessions' states too
    for secret in (MAIL_SECRET, MODEL_SECRET, *tokens):
        assert secret not in everything
