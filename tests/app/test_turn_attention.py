"""A turn that cannot continue parks as needs_attention; an operator retries or aborts it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kernel.common import ids
from tests.app.turn_support import (
    ModelServer,
    run_id,
    start_turn_host,
    submit,
    view,
    wait_final,
    wait_phase,
)
from tests.harness import HostProcess, store_specs


class Outage:
    """The model endpoint answers 503 to rounds after the first while ``on``."""

    def __init__(self) -> None:
        self.on = False

    def __call__(self, messages: list[dict]) -> dict | None:
        return {"status": 503} if self.on and len(messages) > 1 else None


@pytest.fixture(scope="module")
def outage() -> Outage:
    return Outage()


@pytest.fixture(scope="module")
def model(outage: Outage) -> Iterator[ModelServer]:
    server = ModelServer().start()
    server.script = outage
    yield server
    server.stop()


@pytest.fixture(scope="module", params=store_specs())
def host(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, model: ModelServer
) -> Iterator[HostProcess]:
    host = start_turn_host(
        request,
        str(request.param),
        tmp_path_factory.mktemp("attention"),
        {
            "AGENT_MODEL_BASE_URL": model.base_url,
            "AGENT_MAX_MODEL_ATTEMPTS": "2",
            "AGENT_BASE_BACKOFF_S": "0",
        },
    )
    yield host
    host.kill()


def operate(host: HostProcess, session: str, sub: str, action: str, request_id: str = "o1"):
    return host.post(
        f"/api/sessions/{session}/submissions/{sub}/operator",
        {"requestId": request_id, "action": action},
    )


def test_a_parked_turn_retries_from_its_last_committed_round(host, model, outage):
    model.requests.clear()  # the model server is shared with the run on the other store
    outage.on = True
    sub = submit(host, "retry", "calculate 2+3 and then calculate 4+4")

    parked = wait_phase(host, run_id("retry", sub), "needs_attention")
    turn = view(host, "retry")["tasks"][ids.turn_instance_id("retry", sub)]
    outage.on = False
    retried = operate(host, "retry", sub, "retry")
    final = wait_final(host, "retry", sub)
    repeated = operate(host, "retry", sub, "retry")

    assert parked["round"] == 2 and parked["reason"].startswith(
        "model_transient: model endpoint answered 503"
    )
    assert (turn["status"], turn["reason"]) == ("needs_attention", parked["reason"])
    assert retried.status == 202 and repeated.json()["duplicate"] is True
    assert final["status"] == "completed" and final["answer"] == "2+3 = 5\n4+4 = 8"
    # round 1's committed response was never asked for again; round 2 failed twice, then answered
    assert model.calls_by_length() == {1: 1, 3: 3, 5: 1}
    tasks = view(host, "retry")["tasks"]
    assert tasks[f"{run_id('retry', sub)}:round-2.2"]["status"] == "completed"


def test_an_operator_abort_ends_the_turn_with_the_reason(host, outage):
    outage.on = True
    sub = submit(host, "abort", "calculate 1+1 and then calculate 2+2")
    wait_phase(host, run_id("abort", sub), "needs_attention")

    aborted = operate(host, "abort", sub, "abort")
    final = wait_final(host, "abort", sub)
    outage.on = False

    assert aborted.status == 202
    assert final["status"] == "failed"
    reason = view(host, "abort")["tasks"][ids.turn_instance_id("abort", sub)]["reason"]
    assert reason.startswith("needs_attention, aborted by the operator: model_transient")


def test_the_operator_endpoint_refuses_what_is_not_parked_or_malformed(host):
    sub = submit(host, "calm", "hello")
    wait_final(host, "calm", sub)

    assert operate(host, "calm", sub, "retry").status == 409
    assert operate(host, "calm", "0" * 8, "retry").status == 404
    assert operate(host, "calm", sub, "reboot").json()["field"] == "action"
    assert operate(host, "bad%20id!", sub, "retry").status == 400


def test_the_tool_operator_endpoint_refuses_what_is_not_parked_or_malformed(host):
    sub = submit(host, "calm-tool", "calculate 1+2")
    wait_final(host, "calm-tool", sub)
    done = f"{sub}:tool:1:0"  # the calculator's tool task: it ran, it is not parked

    def tool_operate(session: str, task: str, action: str):
        return host.post(
            f"/api/sessions/{session}/tools/{task}/operator", {"requestId": "t1", "action": action}
        )

    assert view(host, "calm-tool")["tasks"][done]["status"] == "completed"
    refused = tool_operate("calm-tool", done, "retry")
    assert refused.status == 409, refused.body
    assert tool_operate("calm-tool", f"{sub}:tool:9:9", "retry").status == 404
    bad = tool_operate("calm-tool", done, "reboot")
    assert bad.status == 400 and bad.json()["field"] == "action"
    assert tool_operate("bad%20id!", done, "retry").status == 400
    assert view(host, "calm-tool")["tasks"][done]["status"] == "completed"  # nothing changed
