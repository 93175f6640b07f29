"""A turn's environment: recorded when it starts, checked when it goes on after a restart.

The turn waits for an approval (round 1) while its host is killed and started again with
another model; the approval lets round 1 finish, and round 2 is where the run checks the
environment of the host that serves it now.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kernel.common import ids
from tests.app.turn_support import ModelServer, run_id, submit, view, wait_final, wait_phase
from tests.harness import HostProcess

# Two host starts and a turn across them: more than the suite's 120 s on a busy machine.
pytestmark = pytest.mark.timeout(300)
PLAN = "remember plan: eggs and then delete document plan"


@pytest.fixture
def model() -> Iterator[ModelServer]:
    server = ModelServer().start()
    yield server
    server.stop()


@pytest.fixture
def host_on(fresh_kernel_host, model: ModelServer, tmp_path: Path) -> Callable[..., HostProcess]:
    def factory(**extra: str) -> HostProcess:
        return fresh_kernel_host(
            {
                "AGENT_MODEL_BASE_URL": model.base_url,
                "AGENT_MODEL_NAME": "model-a",
                "AGENT_WORKSPACE_DIR": str(tmp_path / "workspaces"),
                "AGENT_WORKSPACE_STORE_DIR": str(tmp_path / "workspace-store"),
                **extra,
            }
        )

    return factory


def restart_waiting_turn(host: HostProcess, session: str, **changed: str) -> str:
    """Start a turn, wait for its approval, restart the host with ``changed`` settings and
    approve; the submission id."""
    host.start()
    sub = submit(host, session, PLAN)
    task_id = ids.tool_task_id(sub, 2, 0)
    wait_phase(host, task_id, "approval")
    host.kill()
    host.env.update(changed)
    host.start()
    approved = host.post(
        f"/api/sessions/{session}/approvals/{task_id}", {"requestId": "a1", "decision": "approve"}
    )
    assert approved.status == 202, approved.body
    return sub


def operate(host: HostProcess, session: str, sub: str, action: str):
    return host.post(
        f"/api/sessions/{session}/submissions/{sub}/operator",
        {"requestId": "o1", "action": action},
    )


def test_a_model_change_under_strict_holds_the_turn_until_an_operator_lets_it_go_on(host_on):
    host = host_on(AGENT_ENVIRONMENT_POLICY="strict")
    sub = restart_waiting_turn(host, "env-a", AGENT_MODEL_NAME="model-b")

    parked = wait_phase(host, run_id("env-a", sub), "needs_attention", timeout=90)
    reason = parked["reason"]
    assert reason.startswith("environment_changed: model: openai-compatible:model-a -> ")
    assert "openai-compatible:model-b" in reason and "strict" in reason
    assert "dependencies" not in reason and "tools" not in reason  # only what changed
    state = view(host, "env-a")
    turn = state["tasks"][ids.turn_instance_id("env-a", sub)]
    assert (turn["status"], turn["reason"]) == ("needs_attention", reason)
    recorded = state["documents"][f"environment.{sub}"]["data"]["recorded"]
    assert recorded["model"] == "openai-compatible:model-a"
    assert set(recorded) == {"app", "schema", "dependencies", "model", "tools"}

    assert operate(host, "env-a", sub, "retry").status == 202
    final = wait_final(host, "env-a", sub, timeout=90)

    assert final["status"] == "completed"
    assert final["answer"].splitlines()[-1] == 'Deleted document "plan".'
    document = view(host, "env-a")["documents"][f"environment.{sub}"]["data"]
    assert document["recorded"]["model"] == "openai-compatible:model-b"
    assert document["previous"]["model"] == "openai-compatible:model-a"


def test_an_operator_can_cancel_a_held_turn(host_on):
    host = host_on()  # the default policy is strict
    sub = restart_waiting_turn(host, "env-b", AGENT_MODEL_NAME="model-b")
    wait_phase(host, run_id("env-b", sub), "needs_attention", timeout=90)

    assert operate(host, "env-b", sub, "abort").status == 202
    final = wait_final(host, "env-b", sub, timeout=90)

    assert final["status"] == "failed"
    reason = view(host, "env-b")["tasks"][ids.turn_instance_id("env-b", sub)]["reason"]
    assert reason.startswith("needs_attention, aborted by the operator: environment_changed: model")


@pytest.mark.parametrize("policy", ["off", "model-may-change"])
def test_a_model_change_goes_on_under_a_policy_that_allows_it(host_on, policy):
    host = host_on(AGENT_ENVIRONMENT_POLICY=policy)
    sub = restart_waiting_turn(host, "env-c", AGENT_MODEL_NAME="model-b")

    final = wait_final(host, "env-c", sub, timeout=90)

    assert final["status"] == "completed"
    turn = view(host, "env-c")["tasks"][ids.turn_instance_id("env-c", sub)]
    assert turn["status"] == "completed"
