"""Campaign: two hosts pointed at one store, every way a careless operator could.

SQLite: while a host works, a second one is started on the same file by the same path, a
symlink, a hard link, another spelling of the path, a symlinked directory, and after the
side files (``-shm``, a ``.lock`` left by older versions) were deleted. Every one must
refuse to start (exit 2, ``durable host: ...``). A *copy* of the file is another task hub
(tests/store/test_sqlite_ownership.py). Azure: a second host on the hub takes its share of
the hub's partitions and serves beside the first; when the first stops, it takes the rest.

The oracle is the activities' ledger, outside the task hub: every step runs once (on
Azure, a step may run twice only across the hand-over, and only if the stopping owner
abandoned it), every history has one start, one completion per step and one end, and the
``tally`` entity counts every orchestration once.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import azure_env
from tests.harness import HostProcess
from tests.reliability.conftest import APP, LONG, check_chain, ledger_runs, submit, tally

CHAINS = 40 if LONG else 8
STEPS = 4 if LONG else 3
ROUNDS = 5 if LONG else 1  # times every way is tried while the owner works
ROOT = Path(__file__).resolve().parents[2]


def second_host(store: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "durable_host",
            "start",
            "--app-dir",
            str(APP),
            "--port",
            "0",
            "--store",
            store,
        ],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def careless_paths(tmp_path: Path, database: Path) -> dict[str, str]:
    """Every other way to name ``database``; each makes its alias once."""
    aliases = tmp_path / "aliases"
    aliases.mkdir(exist_ok=True)
    symlink, link, folder = aliases / "alias.db", aliases / "link.db", aliases / "folder"
    if not symlink.exists():
        symlink.symlink_to(database)
        os.link(database, link)
        folder.symlink_to(database.parent, target_is_directory=True)
    return {
        "same path": f"sqlite:{database}",
        "symlink": f"sqlite:{symlink}",
        "hard link": f"sqlite:{link}",
        "relative path": f"sqlite:{os.path.relpath(database, tmp_path)}",
        "symlinked directory": f"sqlite:{folder / database.name}",
    }


def test_a_second_host_on_one_sqlite_file_never_starts(tmp_path: Path) -> None:
    ledger, database = tmp_path / "ledger", tmp_path / "store" / "hub.db"
    database.parent.mkdir()
    owner = HostProcess(APP, f"sqlite:{database}", env={"RELIABILITY_LEDGER": str(ledger)})
    owner.start()
    refused: list[str] = []
    try:
        keys = [f"two-{n:03d}" for n in range(CHAINS)]
        for round_ in range(ROUNDS):
            for key in keys[round_::ROUNDS]:
                submit(owner, "ledger_chain", key, {"key": key, "steps": STEPS})
            for side in [*database.parent.glob("*-shm"), *database.parent.glob("*.lock")]:
                side.unlink()  # the careless operator's clean-up
            for way, store in careless_paths(tmp_path, database).items():
                started = second_host(store, tmp_path)
                assert started.returncode == 2, (way, started.stderr[-2000:])
                assert "durable host: Another durable host is already using" in started.stderr
                assert "Traceback" not in started.stderr
                refused.append(way)
        for key in keys:
            check_chain(owner, key, STEPS)
        runs = ledger_runs(ledger)
        assert set(runs) == {f"{key}:{i}" for key in keys for i in range(STEPS)}
        assert max(runs.values()) == 1, {step: n for step, n in runs.items() if n > 1}
        assert tally(owner) == CHAINS
        assert {line.split(" ")[0] for line in ledger.read_text().splitlines()} == {
            str(owner.process.pid if owner.process else "")
        }
    finally:
        owner.kill()
    print(
        f"two hosts sqlite: {len(refused)} second hosts refused, {CHAINS} chains, "
        f"{sum(runs.values())} runs, 0 duplicates, 0 lost"
    )


def test_a_second_host_on_one_azure_hub_shares_it_and_takes_over_without_duplicates(
    store_kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if store_kind != "azure":
        pytest.skip("the Azure half of the campaign")
    ledger = tmp_path / "ledger"
    env = {**azure_env(request, "two"), "RELIABILITY_LEDGER": str(ledger)}
    owner = HostProcess(APP, "azure", env=dict(env), log_path=tmp_path / "owner.log").start()
    second = HostProcess(APP, "azure", env=dict(env), log_path=tmp_path / "second.log")
    try:
        second.start(timeout=120)  # serves at once: it shares the hub
        keys = [f"hub-{n:03d}" for n in range(CHAINS)]
        for n, key in enumerate(keys):
            submit(owner if n % 2 else second, "ledger_chain", key, {"key": key, "steps": STEPS})
        check_chain(owner, keys[0], STEPS)

        owner.stop()  # mid-workload: the second host takes the owner's partitions
        for key in keys:
            check_chain(second, key, STEPS)
        runs = ledger_runs(ledger)
        assert set(runs) == {f"{key}:{i}" for key in keys for i in range(STEPS)}
        abandoned = (tmp_path / "owner.log").read_text().count("abandoned at stop")
        duplicates = sum(n - 1 for n in runs.values())
        assert duplicates <= abandoned, {step: n for step, n in runs.items() if n > 1}
        assert tally(second) == CHAINS
    finally:
        owner.kill()
        second.kill()
    print(
        f"two hosts azure: shared, then taken over, {CHAINS} chains, {sum(runs.values())} runs, "
        f"{duplicates} duplicates ({abandoned} abandoned at stop), 0 lost"
    )
