"""``export`` / ``import`` with real hosts: a hub moved mid-flight finishes on the target.

A host runs ``tests/apps/transfer`` until its instances wait (on an event, a child, a durable
timer, an entity's state) and one activity is still running, then stops; the hub is exported
and imported into a fresh hub, whose host finishes everything: each result as the app
computes it when nothing moves, each activity's effect exactly once (``TRANSFER_APP_MARKS``),
the timer no earlier than its original due time. The round trip goes SQLite -> Azure
Storage -> PostgreSQL -> SQLite, a host finishing the work after each hop. Bad files and
non-empty targets are refused with nothing written (on PostgreSQL: every table's rows as
they were, or no schema at all), and a hub a host serves is refused on every store.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from durable_host.testing import PACKAGE_ROOT
from durable_host.transfer import fileformat
from tests.harness import APPS, WEBHOOK, HostProcess, wait_for

APP = APPS / "transfer"
TIMER_SECONDS = 15


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "durable_host", *args]
    full_env = {**os.environ, **(env or {}), "PYTHONPATH": str(PACKAGE_ROOT)}
    return subprocess.run(command, capture_output=True, text=True, env=full_env, timeout=120)


def export(store: str, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return cli("export", "--app-dir", str(APP), "--store", store, "--out", str(out), *extra)


def import_(store: str, path: Path) -> subprocess.CompletedProcess[str]:
    return cli("import", "--app-dir", str(APP), "--store", store, str(path))


def marks(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def waiting(host: HostProcess, instance: str) -> None:
    wait_for(
        lambda: (s := host.status(instance)) and s["customStatus"] == "waiting",
        30,
        f"{instance} to wait",
    )


def start_mid_flight(host: HostProcess, marks_file: Path) -> None:
    """Every kind of running work, then a graceful stop while ``slow`` runs."""
    host.start_orchestration("waiter", None, "w1")
    host.start_orchestration("parent", None, "p1")
    host.start_orchestration("napper", {"seconds": TIMER_SECONDS}, "n1")
    host.start_orchestration("entity_user", None, "e1")
    for instance in ("w1", "p1:child", "e1"):
        waiting(host, instance)
    wait_for(lambda: (s := host.status("n1")) and s["customStatus"], 30, "n1 to set its timer")
    host.start_orchestration("sleepy", None, "s1")
    wait_for(lambda: "slow-began:s1" in marks(marks_file), 30, "slow to begin")
    assert host.stop() == 0


def finish(host: HostProcess) -> dict[str, Any]:
    for instance, value in (("w1", "a"), ("p1:child", "b"), ("e1", 3)):
        response = host.post(f"{WEBHOOK}/instances/{instance}/raiseEvent/go", value)
        assert response.status == 202, response.body
    return {i: host.wait_for_status(i, timeout=60) for i in ("w1", "p1", "n1", "e1", "s1")}


def sha(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None


@pytest.fixture(scope="module")
def moved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The hub of a stopped host mid-flight, exported to ``hub.jsonl`` (read-only for tests:
    each imports into a hub of its own)."""
    tmp_path = tmp_path_factory.mktemp("moved")
    marks_file = tmp_path / "marks.txt"
    env = {"TRANSFER_APP_MARKS": str(marks_file)}
    source = f"sqlite:{tmp_path / 'a.db'}"
    start_mid_flight(HostProcess(APP, source, env=dict(env)).start(), marks_file)
    out = tmp_path / "hub.jsonl"
    done = export(source, out)
    assert done.returncode == 0, done.stderr
    return {"file": out, "marks": marks_file, "env": env, "source": source}


@pytest.mark.timeout(600)
def test_a_hub_moved_mid_flight_finishes_on_the_target_with_each_effect_once(moved, tmp_path):
    summary = json.loads(moved["file"].read_text().splitlines()[-1])["trailer"]
    assert summary["instances"] == 7  # five orchestrations, one child, one entity
    assert stat.S_IMODE(moved["file"].stat().st_mode) == 0o600
    target = f"sqlite:{tmp_path / 'b.db'}"

    done = import_(target, moved["file"])
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["instances"] == 7
    host = HostProcess(APP, target, env=dict(moved["env"])).start()
    try:
        results = finish(host)
    finally:
        host.kill()

    assert {i: r["runtimeStatus"] for i, r in results.items()} == dict.fromkeys(
        results, "Completed"
    )
    assert results["w1"]["output"] == ["noted w1", "a"]
    assert results["p1"]["output"] == {"child": ["noted p1:child", "b"]}
    assert results["e1"]["output"] == 8  # 5 before the move, 3 after
    assert results["s1"]["output"] == "slept s1"
    napped = results["n1"]["output"]
    assert datetime.fromisoformat(napped["ran_at"]) >= datetime.fromisoformat(napped["due"])
    effects = [m for m in marks(moved["marks"]) if not m.startswith("slow-began")]
    assert sorted(effects) == sorted(["note:w1", "note:p1:child", "tick:n1", "slow:s1"]), (
        "each activity's effect exactly once"
    )


def assert_finished_as_without_a_move(results: dict[str, Any], effects: list[str]) -> None:
    """The results a host that never moved computes, and the effects of the activities that
    had not run before the move (``tick``, ``slow``) exactly once on this branch."""
    assert {i: r["runtimeStatus"] for i, r in results.items()} == dict.fromkeys(
        results, "Completed"
    )
    assert results["w1"]["output"] == ["noted w1", "a"]
    assert results["p1"]["output"] == {"child": ["noted p1:child", "b"]}
    assert results["e1"]["output"] == 8
    assert results["s1"]["output"] == "slept s1"
    napped = results["n1"]["output"]
    assert datetime.fromisoformat(napped["ran_at"]) >= datetime.fromisoformat(napped["due"])
    assert sorted(m for m in effects if not m.startswith("slow-began")) == ["slow:s1", "tick:n1"]


def run_to_the_end(store: str, env: dict[str, str]) -> dict[str, Any]:
    host = HostProcess(APP, store, env=env).start()
    try:
        return finish(host)
    finally:
        host.kill()


def postgres_hub(url: str) -> dict[str, str]:
    return {"DURABLE_HOST_POSTGRES": url, "DURABLE_HOST_HUB": "Tx" + os.urandom(6).hex()}


def postgres_rows(env: dict[str, str]) -> dict[str, tuple[int, str | None]] | None:
    """The hub's schema: each table's row count and a digest of its rows (the partitions' and heartbeats' rows
    change with every renewal: counted only); None when the schema does not exist."""
    import psycopg

    schema = f"dh_{env['DURABLE_HOST_HUB'].lower()}"
    with psycopg.connect(env["DURABLE_HOST_POSTGRES"], autocommit=True) as conn:
        tables = [
            t
            for (t,) in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                (schema,),
            )
        ]
        if not tables:
            return None
        found = {}
        for table in sorted(tables):
            row = conn.execute(
                "SELECT COUNT(*), md5(string_agg(t::text, ',' ORDER BY t::text))"
                f' FROM "{schema}"."{table}" t'
            ).fetchone()
            assert row is not None
            found[table] = (int(row[0]), None if table in ("partitions", "hosts") else row[1])
        return found


def lease_owners(env: dict[str, str]) -> list[str | None]:
    import psycopg

    schema = f"dh_{env['DURABLE_HOST_HUB'].lower()}"
    with psycopg.connect(env["DURABLE_HOST_POSTGRES"], autocommit=True) as conn:
        rows = conn.execute(f'SELECT owner FROM "{schema}".partitions ORDER BY unit').fetchall()
    return [r[0] for r in rows]


def hop(
    store: str, path: Path, env: dict[str, str], tmp_path: Path, name: str, exact: bool = False
) -> Path:
    """Import ``path`` into an empty hub (a second import refused), export it again before
    any host runs there (the next hop's file; ``exact``: record for record the file it
    came from), then let a host finish the work there."""
    into = cli("import", "--app-dir", str(APP), "--store", store, str(path), env=env)
    assert into.returncode == 0, into.stderr
    again = cli("import", "--app-dir", str(APP), "--store", store, str(path), env=env)
    assert again.returncode == 2 and "not empty" in again.stderr
    out = tmp_path / f"from-{name}.jsonl"
    done = cli("export", "--app-dir", str(APP), "--store", store, "--out", str(out), env=env)
    assert done.returncode == 0, done.stderr
    assert fileformat.verify(out).instances == fileformat.verify(path).instances
    if exact:
        assert list(fileformat.records(out)) == list(fileformat.records(path))

    effects = tmp_path / f"{name}-marks.txt"
    results = run_to_the_end(store, {**env, "TRANSFER_APP_MARKS": str(effects)})
    assert_finished_as_without_a_move(results, marks(effects))
    return out


# Three hops, three hosts, a 15 s timer each: minutes on a slow machine.
@pytest.mark.timeout(1200)
def test_a_round_trip_sqlite_azure_postgres_sqlite_finishes_after_each_hop(
    moved, tmp_path, azurite_connection, postgres_url
):
    azure_env = {
        "AzureWebJobsStorage": azurite_connection,
        "DURABLE_HOST_HUB": "Tx" + os.urandom(6).hex(),
    }
    from_azure = hop("azure", moved["file"], azure_env, tmp_path, "azure")
    from_postgres = hop(
        "postgres", from_azure, postgres_hub(postgres_url), tmp_path, "postgres", exact=True
    )

    target = f"sqlite:{tmp_path / 'c.db'}"
    assert import_(target, from_postgres).returncode == 0
    on_sqlite = tmp_path / "sqlite-marks.txt"
    results = run_to_the_end(target, {"TRANSFER_APP_MARKS": str(on_sqlite)})
    assert_finished_as_without_a_move(results, marks(on_sqlite))


def test_a_second_import_and_an_import_into_a_used_hub_are_refused(moved, tmp_path):
    target = tmp_path / "b.db"
    assert import_(f"sqlite:{target}", moved["file"]).returncode == 0
    before = sha(target)

    again = import_(f"sqlite:{target}", moved["file"])

    assert again.returncode == 2
    assert "is not empty" in again.stderr and "nothing was written" in again.stderr
    assert sha(target) == before
    source = import_(moved["source"], moved["file"])  # the hub it came from: not empty
    assert source.returncode == 2


def test_export_refuses_a_hub_a_host_serves(tmp_path):
    store = f"sqlite:{tmp_path / 'a.db'}"
    host = HostProcess(APP, store).start()
    try:
        done = export(store, tmp_path / "hub.jsonl")
    finally:
        host.kill()
    assert done.returncode == 2
    assert "stop the host first" in done.stderr
    assert not (tmp_path / "hub.jsonl").exists()


def bad_copies(good: Path, tmp: Path) -> dict[str, Path]:
    data = good.read_bytes()
    lines = data.splitlines(keepends=True)
    truncated = tmp / "truncated.jsonl"
    truncated.write_bytes(data[: len(data) - len(lines[-1]) - 10])
    no_trailer = tmp / "no-trailer.jsonl"
    no_trailer.write_bytes(b"".join(lines[:-1]))
    flipped = tmp / "flipped.jsonl"
    middle = len(lines[0]) + len(lines[1]) // 2  # inside the first record
    flipped.write_bytes(data[:middle] + bytes([data[middle] ^ 0x01]) + data[middle + 1 :])
    header = json.loads(lines[0])
    newer = tmp / "newer.jsonl"
    newer.write_bytes(json.dumps({**header, "version": 99}).encode() + b"\n" + b"".join(lines[1:]))
    extra = tmp / "extra.jsonl"
    extra.write_bytes(data + lines[1])
    return {
        "truncated": truncated,
        "no-trailer": no_trailer,
        "flipped": flipped,
        "newer": newer,
        "extra": extra,
    }


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        ("truncated", "truncated"),
        ("no-trailer", "truncated"),
        ("flipped", "corrupt"),
        ("newer", "newer than this host reads"),
        ("extra", "after the trailer"),
    ],
)
def test_a_bad_file_is_refused_before_anything_is_written(moved, bad, says, tmp_path):
    path = bad_copies(moved["file"], tmp_path)[bad]
    target = tmp_path / "b.db"

    done = import_(f"sqlite:{target}", path)

    assert done.returncode == 2
    assert says in done.stderr, done.stderr
    assert not target.exists()  # not even created


def test_keys_travel_only_when_asked_and_the_command_warns(moved, tmp_path):
    source, tmp = moved["source"], tmp_path
    keys = cli("keys", "--app-dir", str(APP), "--store", source, "--json")
    assert keys.returncode == 0, keys.stderr
    master = json.loads(keys.stdout)["master"]["value"]
    assert master not in moved["file"].read_text()  # exported without --include-keys

    with_keys = tmp / "with-keys.jsonl"
    done = export(source, with_keys, "--include-keys")

    assert done.returncode == 0, done.stderr
    assert "holds the host's keys" in done.stderr
    assert stat.S_IMODE(with_keys.stat().st_mode) == 0o600
    assert master in with_keys.read_text()
    target = f"sqlite:{tmp / 'b.db'}"
    assert import_(target, with_keys).returncode == 0
    moved_keys = cli("keys", "--app-dir", str(APP), "--store", target, "--json")
    assert json.loads(moved_keys.stdout)["master"]["value"] == master


def test_the_file_is_streamed_and_verified_line_by_line(tmp_path):
    """A file of many records is read one record at a time, and its summary counts them."""
    from durable_host.core.records import InstanceRecord
    from durable_host.transfer.protocol import InstanceDump

    path = tmp_path / "many.jsonl"
    writer = fileformat.HubFileWriter(path, "sqlite", "2026-01-01T00:00:00.000000Z", False)
    for i in range(1000):
        writer.add(InstanceDump(InstanceRecord(f"i{i}", "waiter", "Running"), ['{"E": 1}']))
    summary = writer.finish()

    assert fileformat.verify(path) == summary
    assert summary.instances == 1000
    first = next(iter(fileformat.records(path)))
    assert isinstance(first, InstanceDump) and first.record.instance_id == "i0"
    assert not path.with_name("many.jsonl.partial").exists()


def test_every_table_of_the_sqlite_schema_is_accounted_for():
    """A table added to the store later must be moved (or said not to be) by the transfer."""
    import re

    from durable_host.store.sqlite.guard import OWNER_SCHEMA
    from durable_host.store.sqlite.sql import SCHEMA
    from durable_host.transfer.sqlite import TABLES

    tables = set(re.findall(r"CREATE TABLE IF NOT EXISTS (\w+)", SCHEMA + OWNER_SCHEMA))
    assert tables == set(TABLES)


@pytest.mark.timeout(300)
def test_azure_export_refuses_a_hub_a_host_serves_and_writes_no_file(tmp_path, azurite_connection):
    env = {
        "AzureWebJobsStorage": azurite_connection,
        "DURABLE_HOST_HUB": "Tb" + os.urandom(6).hex(),
    }
    host = HostProcess(APP, "azure", env=dict(env)).start()
    try:
        out = tmp_path / "hub.jsonl"
        done = cli("export", "--app-dir", str(APP), "--store", "azure", "--out", str(out), env=env)
        assert host.status("missing") is None  # the host still serves
    finally:
        host.kill()

    assert done.returncode == 2
    assert "stop the host first" in done.stderr
    assert not out.exists() and not out.with_name("hub.jsonl.partial").exists()


def test_export_to_a_directory_that_does_not_exist_is_refused_in_one_line(moved, tmp_path):
    done = export(moved["source"], tmp_path / "no" / "such" / "hub.jsonl")

    assert done.returncode == 2
    assert done.stderr.startswith("durable host: export failed, no file written:")
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("bad", "says"),
    [("truncated", "truncated"), ("flipped", "corrupt"), ("newer", "newer than this host reads")],
)
def test_a_bad_file_is_refused_by_a_postgres_target_with_nothing_written(
    moved, bad, says, tmp_path, postgres_url
):
    path = bad_copies(moved["file"], tmp_path)[bad]
    env = postgres_hub(postgres_url)

    done = cli("import", "--app-dir", str(APP), "--store", "postgres", str(path), env=env)

    assert done.returncode == 2
    assert says in done.stderr, done.stderr
    assert postgres_rows(env) is None  # not even the schema created


def test_an_import_into_a_used_postgres_hub_is_refused_and_changes_nothing(
    moved, tmp_path, postgres_url
):
    env = postgres_hub(postgres_url)
    first = cli("import", "--app-dir", str(APP), "--store", "postgres", str(moved["file"]), env=env)
    assert first.returncode == 0, first.stderr
    before = postgres_rows(env)
    assert before is not None and before["instances"][0] == 7

    again = cli("import", "--app-dir", str(APP), "--store", "postgres", str(moved["file"]), env=env)

    assert again.returncode == 2
    assert "is not empty" in again.stderr and "nothing was written" in again.stderr
    assert postgres_rows(env) == before
    owners = lease_owners(env)
    assert owners and set(owners) == {None}  # handed back: a host starts at once


def test_a_postgres_import_killed_before_its_commit_leaves_an_empty_hub(
    moved, tmp_path, postgres_url
):
    """SIGKILL with every record copied, before the COMMIT: nothing stays, and the next
    import takes the dead transfer's hold at once (a process of this machine that is gone)."""
    env = postgres_hub(postgres_url)
    store = ("--store", "postgres", str(moved["file"]))
    killed = cli(
        "import", "--app-dir", str(APP), *store, env={**env, "DURABLE_HOST_FAULTS": "transfer.*"}
    )
    assert killed.returncode == -9, killed.stderr
    rows = postgres_rows(env)
    assert rows is not None and rows["instances"][0] == rows["history"][0] == 0
    owners = lease_owners(env)
    assert owners and None not in owners  # the dead transfer's hold, never handed back

    again = cli("import", "--app-dir", str(APP), *store, env=env)

    assert again.returncode == 0, again.stderr
    rows = postgres_rows(env)
    assert rows is not None and rows["instances"][0] == 7


@pytest.mark.timeout(300)
def test_postgres_export_and_import_refuse_a_hub_a_host_serves(moved, tmp_path, postgres_url):
    env = postgres_hub(postgres_url)
    host = HostProcess(APP, "postgres", env=dict(env)).start()
    try:
        out = tmp_path / "hub.jsonl"
        exported = cli(
            "export", "--app-dir", str(APP), "--store", "postgres", "--out", str(out), env=env
        )
        imported = cli(
            "import", "--app-dir", str(APP), "--store", "postgres", str(moved["file"]), env=env
        )
        assert host.status("missing") is None  # the host still serves
    finally:
        host.kill()

    for done in (exported, imported):
        assert done.returncode == 2
        assert "stop the host first" in done.stderr, done.stderr
    assert not out.exists() and not out.with_name("hub.jsonl.partial").exists()
    rows = postgres_rows(env)
    assert rows is not None and rows["instances"][0] == 0


def test_every_table_of_the_postgres_schema_is_accounted_for():
    """A table added to the store later must be moved (or said not to be) by the transfer."""
    import re

    from durable_host.store.postgres.schema import MIGRATIONS
    from durable_host.transfer.postgres import TABLES

    tables = set(re.findall(r"CREATE TABLE IF NOT EXISTS (\w+)", "".join(MIGRATIONS)))
    assert tables == set(TABLES)
