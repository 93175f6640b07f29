"""``replay-check`` on a real hub while a real host serves it: new code against stored histories.

A host runs ``tests/apps/replay_check`` and leaves instances waiting for an event; the
check then runs as its own process (``python -m durable_host replay-check``) against copies of
the app changed the way a deploy changes code: unchanged, two calls swapped, an orchestrator
removed. The hub must be exactly as it was afterwards (the SQLite file's bytes; on Azure the
hub table's rows and its container's blobs; on PostgreSQL every table's row count and the
content of every table but the partitions and heartbeats, which the serving host renews), and the host must go
on serving it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from durable_host.testing import PACKAGE_ROOT
from tests.harness import APPS, WEBHOOK, HostProcess, wait_for

APP = APPS / "replay_check"


def variant(tmp_path: Path, name: str, old: str = "", new: str = "") -> Path:
    """A copy of the app with ``old`` replaced by ``new`` in its code: the deploy under test."""
    target = tmp_path / name
    shutil.copytree(APP, target)
    code = (APP / "function_app.py").read_text()
    assert old in code
    (target / "function_app.py").write_text(code.replace(old, new))
    return target


SWAPPED = (
    '    a = yield context.call_activity("first", 1)\n    b = yield context.call_activity("second", 2)\n',
    '    b = yield context.call_activity("second", 2)\n    a = yield context.call_activity("first", 1)\n',
)
REMOVED = ("def flow(", "def flow_renamed(")


def run_check(app_dir: Path, host: HostProcess, *extra: str) -> tuple[int, dict[str, Any]]:
    command = [sys.executable, "-m", "durable_host", "replay-check", "--app-dir", str(app_dir)]
    command += ["--store", host.store, "--json", *extra]
    env = {**os.environ, **host.env, "PYTHONPATH": str(PACKAGE_ROOT)}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode in (0, 1), done.stderr
    return done.returncode, json.loads(done.stdout)


def by_id(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["instance_id"]: v for v in report["instances"]}


def hub_fingerprint(host: HostProcess) -> Any:
    """What must not change: the SQLite files' bytes, the Azure hub's row and blob keys, or
    the PostgreSQL hub's row counts and contents."""
    if host.store.startswith("sqlite:"):
        path = Path(host.store.removeprefix("sqlite:"))
        files = [path, Path(f"{path}-wal")]
        return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in files if p.exists()}
    if host.store == "postgres":
        return postgres_fingerprint(host.env["DURABLE_HOST_POSTGRES"], host.env["DURABLE_HOST_HUB"])
    from azure.data.tables import TableServiceClient
    from azure.storage.blob import BlobServiceClient

    connection, hub = host.env["AzureWebJobsStorage"], host.env["DURABLE_HOST_HUB"]
    table = TableServiceClient.from_connection_string(connection).get_table_client(
        f"{hub}HostState"
    )
    rows = sorted((e["PartitionKey"], e["RowKey"]) for e in table.list_entities())
    container = BlobServiceClient.from_connection_string(connection).get_container_client(
        f"{hub.lower()}-hoststate"
    )
    return rows, sorted(b.name for b in container.list_blobs())


def postgres_fingerprint(url: str, hub: str) -> dict[str, tuple[int, str | None]]:
    """Each table of the hub's schema: its row count and (but for the partitions and heartbeats, which a serving
    host renews) a digest of its rows."""
    import psycopg

    schema = f"dh_{hub.lower()}"
    with psycopg.connect(url, autocommit=True) as conn:
        tables = [
            t
            for (t,) in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                (schema,),
            )
        ]
        assert "instances" in tables, tables
        found = {}
        for table in sorted(tables):
            row = conn.execute(
                f"SELECT COUNT(*), md5(string_agg(t::text, ',' ORDER BY t::text))"
                f' FROM "{schema}"."{table}" t'
            ).fetchone()
            assert row is not None
            found[table] = (int(row[0]), None if table in ("partitions", "hosts") else row[1])
        return found


def waiting(host: HostProcess, instance: str) -> None:
    wait_for(
        lambda: (s := host.status(instance)) and s["customStatus"] == "waiting",
        30,
        f"{instance} to wait for its event",
    )


@pytest.fixture
def served(make_host) -> tuple[HostProcess, list[str]]:
    """A host serving the app, with two ``flow`` instances and one ``steady`` waiting, and
    one ``steady`` finished."""
    host = make_host("replay_check").start()
    flows = [host.start_orchestration("flow", None, f"flow-{i}") for i in range(2)]
    steady = host.start_orchestration("steady", None, "steady-1")
    done = host.start_orchestration("steady", None, "steady-done")
    for instance in [*flows, steady, done]:
        waiting(host, instance)
    assert host.post(f"{WEBHOOK}/instances/{done}/raiseEvent/go", 7).status == 202
    assert host.wait_for_status(done)["runtimeStatus"] == "Completed"
    return host, [*flows, steady]


def test_unchanged_code_is_ok_for_every_running_instance_and_the_hub_is_untouched(served, tmp_path):
    host, running = served
    before = hub_fingerprint(host)

    code, report = run_check(APP, host)

    assert code == 0
    assert sorted(by_id(report)) == sorted(running)  # ended instances are not chosen
    assert {v["verdict"] for v in report["instances"]} == {"ok"}
    assert report["failed"] is False
    code, report = run_check(APP, host, "--instances", "all")
    assert code == 0 and "steady-done" in by_id(report)
    assert hub_fingerprint(host) == before
    # The host still serves the hub as before.
    assert host.post(f"{WEBHOOK}/instances/flow-0/raiseEvent/go", 1).status == 202
    assert host.wait_for_status("flow-0")["output"] == [10, 200]


def test_reordered_calls_are_nondeterministic_naming_the_event_and_both_actions(served, tmp_path):
    host, _ = served
    before = hub_fingerprint(host)

    code, report = run_check(variant(tmp_path, "swapped", *SWAPPED), host)

    assert code == 1 and report["failed"] is True
    verdicts = by_id(report)
    for instance in ("flow-0", "flow-1"):
        verdict = verdicts[instance]
        assert verdict["verdict"] == "nondeterministic"
        assert verdict["event"] == "TaskScheduled #0"
        assert verdict["expected"] == "activity 'first'"
        assert verdict["actual"] == "a call to activity 'second'"
        assert "Non-Deterministic workflow detected" in verdict["message"]
    assert verdicts["steady-1"]["verdict"] == "ok"
    assert hub_fingerprint(host) == before


def test_a_removed_orchestrator_is_missing(served, tmp_path):
    host, _ = served

    code, report = run_check(variant(tmp_path, "removed", *REMOVED), host)

    assert code == 1
    verdicts = by_id(report)
    assert verdicts["flow-0"]["verdict"] == "missing"
    assert "The function 'flow' doesn't exist" in verdicts["flow-0"]["message"]
    assert verdicts["steady-1"]["verdict"] == "ok"


def test_named_instances_only_and_an_unknown_one_fails(served, tmp_path):
    host, _ = served

    code, report = run_check(
        variant(tmp_path, "swapped", *SWAPPED), host, "--instances", "steady-1", "nope"
    )

    assert code == 1
    assert {k: v["verdict"] for k, v in by_id(report).items()} == {
        "steady-1": "ok",
        "nope": "not-found",
    }


def test_text_output_names_the_event_and_says_not_to_deploy(served, tmp_path):
    host, _ = served
    command = [sys.executable, "-m", "durable_host", "replay-check"]
    command += ["--app-dir", str(variant(tmp_path, "swapped", *SWAPPED)), "--store", host.store]
    env = {**os.environ, **host.env, "PYTHONPATH": str(PACKAGE_ROOT)}

    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)

    assert done.returncode == 1, done.stderr
    assert (
        "nondeterministic flow-0 (flow, Running): TaskScheduled #0: history expected"
        " activity 'first', the code now: a call to activity 'second'" in done.stdout
    )
    assert done.stdout.rstrip().endswith("would fail: do not deploy")


def test_a_mix_of_selection_words_and_ids_is_bad_usage(tmp_path):
    command = [sys.executable, "-m", "durable_host", "replay-check", "--instances", "all", "x"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "not a mix" in done.stderr


# --- the pure core, without a store ----------------------------------------------------------


def _recorded_flow() -> tuple[Any, list[dict[str, Any]]]:
    """A stored history: started, ``first`` scheduled, then its result in (and nothing else
    asked for yet: the history ends as the code reads the result)."""
    from durable_host.core import history as h
    from durable_host.core.records import InstanceRecord

    at = "2026-01-01T00:00:00.000000Z"
    started = h.execution_started(
        at=at, name="flow", instance_id="i1", execution_id="x1", input_json=None, version="1.0"
    )
    events = [
        h.orchestrator_started(at),
        started,
        h.task_scheduled(0, at, "first", "1"),
        h.orchestrator_completed(at),
        h.orchestrator_started(at),
        h.task_completed(0, at, "10"),
    ]
    return InstanceRecord("i1", "flow", "Running", "x1", "1.0"), events


def _handle(body: Any) -> Any:
    import azure.durable_functions as df

    return df.Orchestrator.create(body)


def test_judge_other_version_fails_the_gate_only_under_fail():
    from durable_host.core.versioning import FailureStrategy, MatchStrategy, VersionPolicy
    from durable_host.engine import replay_check

    record, events = _recorded_flow()
    strict = VersionPolicy("2.0", MatchStrategy.STRICT, FailureStrategy.REJECT)

    waits = replay_check.judge(record, events, None, strict)
    fails = replay_check.judge(
        record, events, None, VersionPolicy("2.0", MatchStrategy.STRICT, FailureStrategy.FAIL)
    )

    assert (waits.verdict, waits.failure) == ("other-version", False)
    assert (fails.verdict, fails.failure) == ("other-version", True)
    assert "defaultVersion '2.0'" in (waits.message or "")


def test_judge_code_that_raises_while_replaying_fails():
    from durable_host.core.versioning import VersionPolicy
    from durable_host.engine import replay_check

    record, events = _recorded_flow()

    def broken(context: Any) -> Any:
        value = yield context.call_activity("first", 1)
        raise KeyError(f"shape of {value}")

    verdict = replay_check.judge(record, events, _handle(broken), VersionPolicy())

    assert (verdict.verdict, verdict.failure) == ("fails", True)
    assert "shape" in (verdict.message or "")


def test_judge_code_that_no_longer_schedules_a_recorded_call_names_it():
    from durable_host.core.versioning import VersionPolicy
    from durable_host.engine import replay_check

    record, events = _recorded_flow()

    def waits_only(context: Any) -> Any:
        yield context.wait_for_external_event("go")

    verdict = replay_check.judge(record, events, _handle(waits_only), VersionPolicy())

    assert verdict.verdict == "nondeterministic"
    assert verdict.event == "TaskScheduled #0" and verdict.expected == "activity 'first'"
    assert "no longer" not in (verdict.actual or "") and verdict.actual


@pytest.mark.parametrize("status", ["Pending", "ContinuedAsNew"])
def test_judge_an_instance_between_executions_has_nothing_to_replay(status):
    from durable_host.core.versioning import VersionPolicy
    from durable_host.engine import replay_check

    record, events = _recorded_flow()
    record.status = status

    def changed(context: Any) -> Any:
        yield context.wait_for_external_event("go")  # would not match the old execution

    verdict = replay_check.judge(record, events, _handle(changed), VersionPolicy())

    assert (verdict.verdict, verdict.failure) == ("ok", False)
    assert "nothing to replay" in (verdict.message or "")
