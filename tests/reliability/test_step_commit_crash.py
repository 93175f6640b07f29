"""Kills around the one commit of an activity step (``Engine.deliver``, ``Store.commit_step``).

An activity's result is committed together with the episode it unblocks. Until that commit
the result exists only in the host's memory, so a kill anywhere between the activity's
return and the commit runs the activity again after the restart - exactly once more, as a
kill between an activity's return and its own completion always did - and a kill after the
commit runs nothing again. Each case: a fresh host of the reliability app with
``DURABLE_HOST_FAULTS=<point>@2`` runs ``w_steps`` (three ``effect`` activities, each
appending its key to the ledger), dies at the second step, is started again without faults,
and the chain must complete with the exact output. The ledger says how often each step ran.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.harness import store_specs
from tests.reliability.support import (
    HostDied,
    Ledger,
    alive,
    reliability_host,
    start_once,
    wait_terminal,
)

pytestmark = pytest.mark.crash

CASES = [
    # point, the step run twice (None: every step once)
    ("activity.before_complete", 2),  # the activity returned; its result not handed over
    ("step.before_commit", 2),  # the episode ran with the result; nothing committed
    ("store.before_step_commit", 2),  # inside the store's step commit, before its commit point
    ("step.after_commit", None),  # committed: the result is durable, nothing runs again
]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", store_specs())
@pytest.mark.parametrize(("point", "again"), CASES)
def test_a_kill_around_the_step_commit_runs_the_activity_again_only_before_it(
    request: pytest.FixtureRequest, tmp_path: Path, kind: str, point: str, again: int | None
) -> None:
    label = point.replace(".", "-").replace("_", "-")
    ledger = Ledger(tmp_path / "ledger")
    host = reliability_host(
        request, kind, tmp_path, label, {"RELIABILITY_LEDGER": str(ledger.path)}
    )
    instance_id = f"step-{label}"
    host.start(faults=f"{point}@2")
    try:
        try:
            start_once(host, "w_steps", instance_id, {"n": 3})
            wait_terminal(host, instance_id, timeout=30)
        except HostDied:
            pass
        assert not alive(host), f"the host never reached {point}@2"
        host.wait_exit(10)
        assert host.log_path is not None
        assert f"SIGKILL at {point}@2" in host.log_path.read_text()
        host.start()
        final = wait_terminal(host, instance_id)
    finally:
        host.kill()

    assert (final["runtimeStatus"], final["output"]) == ("Completed", [10, 20, 30])
    runs = ledger.counts()
    expected = {f"{instance_id}:{step}": 2 if step == again else 1 for step in (1, 2, 3)}
    assert dict(runs) == expected
