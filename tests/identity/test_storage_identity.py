"""The Storage extension's bindings over an identity-based connection: ``AppStorage__blobServiceUri``
/ ``__queueServiceUri`` / ``__tableServiceUri`` with ``__credential=managedidentity`` and
``__clientId``, against Azurite in OAuth mode with tokens from the managed-identity endpoint
stand-in; the task hub in SQLite. Blob output and input, table output and input, and a queue
output taken by the queue trigger all authenticate with the identity's tokens."""

from __future__ import annotations

import json
from pathlib import Path

from tests.harness import APPS, HostProcess, wait_for
from tests.identity.support import IdentityEndpoint

STORAGE = "https://storage.azure.com"


def test_bindings_and_triggers_on_an_identity_based_connection(
    identity_env: dict[str, str], identity_endpoint: IdentityEndpoint, tmp_path: Path
) -> None:
    app_storage = {
        key.replace("AzureWebJobsStorage", "AppStorage"): value
        for key, value in identity_env.items()
        if key.startswith("AzureWebJobsStorage__")
    }
    host = HostProcess(
        APPS / "storage",
        f"sqlite:{tmp_path / 'hub.db'}",
        env={
            **app_storage,
            "STAMP_CONTAINER": "stamps",
            "SAMPLES_CONTAINER": "samples-identity",
            "TIMER_CONTAINER": "timers-identity",
            "PLAIN_QUEUE": "plain-identity",
            "JOBS_QUEUE": "jobs",
            "FAILING_QUEUE": "failing-identity",
            "SLOW_QUEUE": "slow-identity",
        },
        log_path=tmp_path / "host.log",
    ).start(timeout=60)
    try:
        assert host.request("PUT", "/api/files/who", raw=b"identity").status == 200
        assert host.get("/api/files/who").body == b"identity"
        assert host.request("PUT", "/api/people/p/r", {"Age": 33}).status == 200
        assert json.loads(host.get("/api/people/p/r").body)["Age"] == 33

        def jobs_drained() -> bool:
            queues = host.get("/admin/host/scale").json()["queues"]
            return any(q["queue"] == "jobs" and q.get("length") == 0 for q in queues)

        wait_for(jobs_drained, 30, "the queue trigger to take the two messages")
    finally:
        host.kill()
    assert STORAGE in identity_endpoint.resources()
