"""Testing a Durable Functions app end to end with the host's pytest fixture, a crash included.

Run with the host installed (`pip install durable-host`): `pytest examples/plugin_test`."""

from pathlib import Path

APP = Path(__file__).parent / "app"


def test_an_order_is_shipped_once_approved_even_across_a_crash(durable_host_factory, tmp_path):
    ledger = tmp_path / "ledger.txt"
    host = durable_host_factory(APP, env={"ORDERS_LEDGER": str(ledger)})

    order = host.start_new("process_order", {"item": "book", "qty": 2})
    host.wait_for_custom_status(order, "awaiting approval")

    host.kill()  # SIGKILL while the orchestration waits for its event
    host.restart()  # a new process on the same store
    host.raise_event(order, "approved", {"by": "ann"})
    final = host.wait_for_completion(order)

    assert final["output"] == {
        "reservation": "R-book-2",
        "approved_by": "ann",
        "tracking": "T-R-book-2",
    }
    # The reservation confirmed before the crash was not made again.
    assert ledger.read_text().splitlines() == ["reserve:book", "ship:book"]
    history = host.status(order, history=True)["historyEvents"]
    completed = [e["FunctionName"] for e in history if e["EventType"] == "TaskCompleted"]
    assert completed == ["reserve", "ship"]
    assert host.purge(order)
    assert host.status(order) is None
