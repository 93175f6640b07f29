"""Entity batches through the SDK's own entity handle (protocol reference §4)."""

from __future__ import annotations

import json

import azure.durable_functions as df
import pytest

from durable_host.core import entity, wire

T0 = "2024-01-01T00:00:00.000000Z"


def counter(context: df.DurableEntityContext) -> None:
    value = context.get_state(lambda: 0)
    op = context.operation_name
    if op == "add":
        context.set_state(value + context.get_input())
    elif op == "get":
        context.set_result(value)
    elif op == "explode":
        context.set_state(value + 100)  # changed before raising: the SDK keeps it
        raise ValueError("exploded")
    elif op == "delete":
        context.destruct_on_exit()
    elif op == "peek":
        pass  # touches nothing


HANDLE = df.Entity.create(counter)


def op(
    name: str,
    value=None,
    *,
    request_id: str = "r",
    signal: bool = False,
    parent: str | None = "caller",
) -> tuple[int, dict]:
    request = {
        "op": name,
        "id": request_id,
        "input": json.dumps(value) if value is not None else None,
    }
    if signal:
        request["signal"] = True
    else:
        request.update(parent=parent, parentExecution="e1")
    return (0, {"kind": "op", "request": request})


def run(messages, exists=False, state=None):
    numbered = [(i, m) for i, (_, m) in enumerate(messages)]
    return entity.run_batch(HANDLE, "@counter@k", exists, state, numbered, T0)


def responses(commit) -> list:
    return [json.loads(json.loads(m["event"]["Input"])["result"]) for _, m in commit.responses]


def test_the_batch_request_has_exactly_the_four_keys_and_double_encoded_inputs():
    seen = []

    def spy(raw: str) -> str:
        seen.append(json.loads(raw))
        return HANDLE(raw)

    entity.run_batch(spy, "@counter@k", False, None, [(0, op("add", 5, signal=True)[1])], T0)

    assert set(seen[0]) == {"self", "exists", "state", "batch"}
    assert seen[0]["self"] == {"name": "counter", "key": "k"}
    assert seen[0]["batch"][0]["input"] == json.dumps(json.dumps(5))


def test_operations_apply_in_order_and_callers_get_one_response_each():
    commit = run(
        [
            op("add", 2, signal=True),
            op("add", 3, request_id="a", signal=True),
            op("get", request_id="g"),
        ]
    )

    assert commit.exists and json.loads(commit.state_json) == 5
    assert [target for target, _ in commit.responses] == ["caller"]
    assert responses(commit) == [5]
    assert commit.consumed == [0, 1, 2]


def test_response_is_an_event_named_after_the_request_for_the_callers_execution():
    commit = run([op("get", request_id="req-1")], exists=True, state="7")

    _, message = commit.responses[0]
    assert message["event"]["Name"] == "req-1" and message["execution_id"] == "e1"
    assert json.loads(message["event"]["Input"]) == {"result": "7"}


def test_result_carries_over_to_an_operation_that_sets_none():
    commit = run([op("get", request_id="g"), op("peek", request_id="p")], exists=True, state="4")

    assert responses(commit) == [4, 4]  # SDK: _result is not reset between operations


def test_untouched_state_passes_through_byte_for_byte():
    def reader(context: df.DurableEntityContext) -> None:
        context.set_result("no state read")

    numbered = [(0, op("peek", request_id="p")[1])]
    commit = entity.run_batch(
        df.Entity.create(reader), "@reader@k", True, '{"a":  1}', numbered, T0
    )

    assert commit.state_json == '{"a":  1}'


def test_failed_operation_keeps_the_state_the_sdk_left_and_reports_the_error():
    commit = run([op("explode", request_id="x"), op("add", 1, signal=True)], exists=True, state="1")

    _, message = commit.responses[0]
    assert json.loads(message["event"]["Input"])["exceptionType"] == "Error"
    assert responses(commit) == ["exploded"]
    assert json.loads(commit.state_json) == 102


def test_destruct_on_exit_deletes_the_entity():
    commit = run([op("delete", signal=True)], exists=True, state="3")

    assert commit.exists is False


@pytest.mark.parametrize("handle", [None])
def test_unknown_entity_answers_every_caller_with_an_error(handle):
    commit = entity.run_batch(handle, "@nosuch@k", False, None, [(0, op("get")[1])], T0)

    _, message = commit.responses[0]
    assert "not defined" in json.loads(json.loads(message["event"]["Input"])["result"])


def test_entity_ids_are_lowercased_names_with_the_key_kept():
    assert wire.entity_instance_id("Counter", "Key1") == "@counter@Key1"
    assert wire.split_entity_id("@counter@a@b") == ("counter", "a@b")


def test_responses_carry_the_time_the_results_exist_not_the_time_the_batch_started():
    # The clock is read after the entity ran: a response is never dated before its answer.
    ticks = iter(["2024-01-01T00:00:07.000000Z"])
    numbered = [(0, op("add", 2, request_id="a")[1]), (1, op("get", request_id="b")[1])]

    commit = entity.run_batch(
        HANDLE, "@counter@k", False, None, numbered, T0, clock=lambda: next(ticks)
    )

    stamps = [m["event"]["Timestamp"] for _, m in commit.responses]
    assert stamps == ["2024-01-01T00:00:07.000000Z"] * 2
    assert commit.now == T0  # the entity's last operation time is still the batch's start
