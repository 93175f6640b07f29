"""An instance whose partition another host owns is dropped, not retried (a shared hub)."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import azure.durable_functions as df
import azure.functions as func
import pytest

from durable_host.core import replay
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


class OtherHostOwns(SqliteStore):
    """Every fetch of ``taken`` finds its partition owned by another host."""

    def __init__(self, path: Path, taken: str) -> None:
        super().__init__(path)
        self.taken = taken
        self.fetches = 0

    async def create_instance(self, *args: Any, count_first: bool = False, **kw: Any) -> int | None:
        # As a shared store answers: nothing handed over, the episode fetches its inbox.
        return await super().create_instance(*args, **kw)

    async def fetch_messages(
        self, instance_id: str, now: str, limit: int = 1000
    ) -> list[tuple[int, dict[str, Any]]]:
        if instance_id == self.taken:
            self.fetches += 1
            raise UnitLostError(f"this host does not own the partition of {instance_id}")
        return await super().fetch_messages(instance_id, now, limit)


def test_a_lost_partitions_instance_is_left_to_its_owner_without_retries(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def run() -> tuple[int, dict[str, int], str | None]:
        store = OtherHostOwns(tmp_path / "hub.db", "theirs")
        await store.open()
        engine = Engine(INDEX, store, config_mod.HostConfig(app_dir=tmp_path))
        await engine.start()
        try:
            await DurableClient(engine).start("nothing", "theirs", json.dumps(None))
            await DurableClient(engine).start("nothing", "ours", json.dumps(None))
            for _ in range(300):  # bounded: 3 s; a retry would come after 0.5 s
                record = await store.get_instance("ours")
                if record is not None and record.status == "Completed":
                    break
                await asyncio.sleep(0.01)
            await asyncio.sleep(1.5)
            theirs = await store.get_instance("theirs")
            return store.fetches, dict(engine._failures), theirs.status if theirs else None
        finally:
            await engine.stop(1.0)
            await store.close()
            replay.install(False)

    with caplog.at_level(logging.INFO, logger="durable_host"):
        fetches, failures, status = asyncio.run(run())

    assert fetches == 1  # dropped, not retried with back-off
    assert failures == {}
    assert status == "Pending"  # untouched: its owner runs it
    assert "left to the owner of its partition" in caplog.text
    assert "storage failed" not in caplog.text
