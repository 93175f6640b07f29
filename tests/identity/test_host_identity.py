"""The durable host on the Azure store with identity-based storage only (Azurite in OAuth
mode, tokens from the managed-identity endpoint stand-in), running an app whose activity uses
the app's blob adapter, and call_http with a managed-identity token source."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.harness import HostProcess
from tests.identity.support import CLIENT_ID, IdentityEndpoint

APP = Path(__file__).resolve().parent / "app"
STORAGE = "https://storage.azure.com"
MANAGEMENT = "https://management.core.windows.net"


def _host(tmp_path: Path, hub: str) -> HostProcess:
    return HostProcess(
        APP,
        "azure",
        env={"DURABLE_HOST_HUB": hub, "DURABLE_HOST_AZURE_RETRY_SECONDS": "4"},
        log_path=tmp_path / "host.log",
    )


class EchoServer:
    """Answers every GET with 200 and remembers the Authorization header it was sent."""

    def __init__(self) -> None:
        seen: list[str | None] = []

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                seen.append(self.headers.get("Authorization"))
                body = json.dumps({"path": self.path}).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_args: Any) -> None:
                pass

        self.seen = seen
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/resource"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def echo() -> Iterator[EchoServer]:
    server = EchoServer()
    yield server
    server.stop()


# Three host starts; the one without an identity endpoint waits out azure-identity's own
# retries of the endpoint (about 20 s) before the store gives up.
@pytest.mark.timeout(300)
def test_the_host_runs_on_identity_based_storage_and_survives_an_identity_outage(
    identity_env: dict[str, str], identity_endpoint: IdentityEndpoint, tmp_path: Path
) -> None:
    hub = "Id" + uuid.uuid4().hex[:12]
    host = _host(tmp_path, hub).start(timeout=60)
    try:
        instance = host.start_orchestration("kept_after_event", instance_id="kept-1")
        host.wait_for_status(instance, ("Running",), timeout=30)
    finally:
        host.stop()
    assert set(identity_endpoint.resources()) == {STORAGE}
    assert {r["client_id"] for r in identity_endpoint.requests} == {CLIENT_ID}

    identity_endpoint.stop()
    down = _host(tmp_path, hub)
    with pytest.raises(RuntimeError, match="host did not start"):
        down.start(timeout=60)
    log = (tmp_path / "host.log").read_text()
    assert "AzureWebJobsStorage__credential" in log and "managed identity" in log

    identity_endpoint.start()
    host = _host(tmp_path, hub).start(timeout=60)
    try:
        assert (
            host.post(
                f"/runtime/webhooks/durabletask/instances/{instance}/raiseEvent/go",
                "kept through the outage",
            ).status
            == 202
        )
        done = host.wait_for_status(instance, timeout=60)
    finally:
        host.stop()
    assert done["runtimeStatus"] == "Completed"
    assert done["output"] == "kept through the outage"
    _no_token_in(tmp_path / "host.log", identity_endpoint)


@pytest.mark.timeout(180)
def test_call_http_with_a_token_source_sends_the_identitys_token_for_the_resource(
    identity_env: dict[str, str],
    identity_endpoint: IdentityEndpoint,
    echo: EchoServer,
    tmp_path: Path,
) -> None:
    host = _host(tmp_path, "Id" + uuid.uuid4().hex[:12]).start(timeout=60)
    try:
        instance = host.start_orchestration(
            "token_call", {"url": echo.url, "resource": MANAGEMENT + "/"}
        )
        done = host.wait_for_status(instance, timeout=60)
        history = host.status(instance, "?showHistory=true&showHistoryOutput=true&showInput=true")
    finally:
        host.stop()

    assert done["output"]["status"] == 200, done
    (sent,) = echo.seen
    assert sent is not None and sent.startswith("Bearer ")
    token = sent.removeprefix("Bearer ")
    assert identity_endpoint.valid(token, MANAGEMENT)
    assert MANAGEMENT in identity_endpoint.resources()
    # The token went on the wire only: not in the status, the history or the log.
    assert token not in json.dumps(history)
    _no_token_in(tmp_path / "host.log", identity_endpoint)


def _no_token_in(log: Path, endpoint: IdentityEndpoint) -> None:
    text = log.read_text()
    assert endpoint.issued
    assert [t for t in endpoint.issued if t in text or t.split(".")[2] in text] == []
    assert endpoint.header not in text
