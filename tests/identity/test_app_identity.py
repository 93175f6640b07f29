"""The agent app as Azure recommends deploying it: on the durable host's Azure store with
identity-based storage only, its ledger and content in blobs through the managed identity, and
its model on Microsoft Entra ID (``AGENT_MODEL_AUTH=entra``), no key anywhere."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote

import pytest

from adapters import app_state
from adapters.content_store import BlobContentStore
from tests.app.turn_support import submit, view, wait_final
from tests.harness import ROOT, HostProcess
from tests.identity.support import IdentityEndpoint
from tests.identity.test_model_entra import COGNITIVE, EntraModelServer

STORAGE = "https://storage.azure.com"


@pytest.fixture
def entra_model(identity_endpoint: IdentityEndpoint) -> Iterator[EntraModelServer]:
    server = EntraModelServer(identity_endpoint).start()
    yield server
    server.stop()


@pytest.mark.timeout(240)
def test_a_turn_runs_with_identity_based_storage_and_an_entra_model(
    identity_env: dict[str, str],
    identity_endpoint: IdentityEndpoint,
    entra_model: EntraModelServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    container, ledger = f"content-{uuid.uuid4().hex[:12]}", f"ledger-{uuid.uuid4().hex[:12]}"
    host = HostProcess(
        ROOT,
        "azure",
        env={
            "AGENT_MODEL_BASE_URL": entra_model.base_url,
            "AGENT_MODEL_AUTH": "entra",
            "AGENT_CONTENT_CONTAINER": container,
            "AGENT_LEDGER_CONTAINER": ledger,
            "AGENT_TOOL_LEDGER_FILE": str(tmp_path / "tool-ledger.txt"),
        },
        log_path=tmp_path / "host.log",
    ).start(timeout=90)
    long_text = "Please summarise this. " + "lorem ipsum dolor sit amet " * 400  # > 4 KiB
    try:
        sub = submit(host, "id-session", long_text)
        final = wait_final(host, "id-session", sub, timeout=120)
        session = view(host, "id-session")
    finally:
        host.stop()

    assert final["status"] == "completed", final
    assert final["text"] is None and final["text_ref"]  # too long to keep inline
    # The model was called with the identity's tokens for Cognitive Services, none refused.
    assert entra_model.requests and entra_model.refused == 0
    assert set(identity_endpoint.resources()) == {STORAGE, COGNITIVE}
    # The long submission went to the content container, over the same identity.
    refs = [e["content_ref"] for e in session["entries"] if e.get("content_ref")]
    monkeypatch.setattr(app_state, "_containers", {})
    store = BlobContentStore(app_state.container_client(app_state.storage_connection(), container))
    assert refs and store.get(refs[0]) == long_text
    # The model call's attempt record went to the ledger container.
    attempts = app_state.container_client(app_state.storage_connection(), ledger)
    assert any(":model:" in unquote(blob.name) for blob in attempts.list_blobs())
    # No token or identity header in the log or the session's view.
    text = (tmp_path / "host.log").read_text() + json.dumps(session)
    assert [t for t in identity_endpoint.issued if t in text] == []
    assert identity_endpoint.header not in text
