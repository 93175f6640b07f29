"""An attempt lost to a takeover is not the instance's fault: repeated flaps of a host's
link never quarantine healthy work (``attempts.py``, "Lost to a takeover").

The store below plays a shared hub whose partition this host loses in the middle of each
of the instance's first attempts (the commit meets ``UnitLostError``, as after another host
took the partition over) and gets back afterwards. With two attempts allowed, three such
flaps quarantined the instance before the fix (every lost attempt stayed counted: 1, 2, 3).
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path
from typing import Any

import azure.durable_functions as df
import azure.functions as func

from durable_host.core import replay
from durable_host.core.records import Episode
from durable_host.engine.client import DurableClient
from durable_host.engine.loops import Engine
from durable_host.functions import config as config_mod
from durable_host.functions import loader
from durable_host.store.base import UnitLostError
from durable_host.store.sqlite.store import SqliteStore

app = df.DFApp(http_auth_level=func.AuthLevel.ANONYMOUS)


@app.orchestration_trigger(context_name="context")
def nothing(context: df.DurableOrchestrationContext):
    return "done"


INDEX = loader.index_functions(app)
FLAPS = 3


class Flapping(SqliteStore):
    """The partition of ``x`` is taken over during each of its first ``FLAPS`` commits."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.lost = 0

    async def create_instance(self, *args: Any, count_first: bool = False, **kw: Any) -> int | None:
        return await super().create_instance(*args, **kw)  # a shared store's answer

    async def commit_episode(
        self, instance_id: str, episode: Episode, now: str, *, count_next: bool = False
    ) -> Any:
        if instance_id == "x" and self.lost < FLAPS:
            self.lost += 1
            raise UnitLostError("partition 0: another host took it over")
        return await super().commit_episode(instance_id, episode, now, count_next=count_next)


def attempts(path: Path) -> int:
    with sqlite3.connect(path) as db:
        row = db.execute("SELECT count FROM attempts WHERE instance_id = 'x'").fetchone()
    return int(row[0]) if row else 0


def test_attempts_lost_to_takeovers_are_given_back_and_never_quarantine(tmp_path: Path) -> None:
    path = tmp_path / "hub.db"

    async def run() -> tuple[str | None, Any]:
        store = Flapping(path)
        await store.open()
        engine = Engine(INDEX, store, config_mod.HostConfig(app_dir=tmp_path), poison_attempts=2)
        await engine.start()
        try:
            await DurableClient(engine).start("nothing", "x", json.dumps(None))
            for flap in range(1, FLAPS + 1):
                for _ in range(500):  # bounded: 5 s for the loss and the give-back
                    if store.lost == flap and attempts(path) == 0:
                        break
                    await asyncio.sleep(0.01)
                assert store.lost == flap
                assert attempts(path) == 0, "the attempt lost to a takeover stayed counted"
                engine.notify("x")  # the partition is this host's again
            for _ in range(500):
                record = await store.get_instance("x")
                if record is not None and record.status in ("Completed", "Failed"):
                    break
                await asyncio.sleep(0.01)
            record = await store.get_instance("x")
            return (record.status if record else None), (record.output_json if record else None)
        finally:
            await engine.stop(1.0)
            await store.close()
            replay.install(False)

    status, output = asyncio.run(run())
    assert status == "Completed", output
    assert json.loads(output) == "done"
