"""Storage bindings the host refuses at start-up, each with one line naming the function, the
binding and the setting or property, and exit status 2 - before any store is opened."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from durable_host.functions import loader
from durable_host.host import storage_extension
from durable_host.triggers.storage.spec import StorageConfigError
from tests.harness import ROOT

HEAD = """
import azure.durable_functions as df
import azure.functions as func
app = df.DFApp()
"""
BLOB_ON_HTTP = """
@app.route(route="r")
@app.blob_input(arg_name="b", path="files/{x}", connection="{conn}")
def reader(req: func.HttpRequest, b: str) -> str:
    return b
"""
CASES = {
    "orchestrator": (
        """
@app.blob_input(arg_name="b", path="files/x", connection="AppStorage")
@app.orchestration_trigger(context_name="context")
def flow(context, b: str):
    return b
""",
        {},
        "function 'flow' is an orchestrator function and may not carry the blob binding 'b'",
    ),
    "missing": (
        BLOB_ON_HTTP.replace("{conn}", "Nowhere"),
        {},
        (
            "function 'reader': blob binding 'b': connection 'Nowhere': the connection Nowhere is"
            " not set"
        ),
    ),
    "malformed": (
        BLOB_ON_HTTP.replace("{conn}", "AppStorage"),
        {"AppStorage": "this is not a connection string"},
        "connection 'AppStorage': AppStorage is not a valid storage connection string",
    ),
    "identity without a queue": (
        """
@app.queue_trigger(arg_name="m", queue_name="jobs", connection="Ident")
def drain(m: func.QueueMessage) -> None:
    pass
""",
        {"Ident__blobServiceUri": "https://acct.blob.core.windows.net"},
        (
            "function 'drain': queueTrigger binding 'm': connection 'Ident': the connection Ident"
            " has no queue service"
        ),
    ),
    "unknown property": (
        """
@app.route(route="r")
@app.generic_input_binding(arg_name="b", type="blob", path="files/x", connection="AppStorage",
                           bogus="1")
def reader(req: func.HttpRequest, b: str) -> str:
    return b
""",
        {},
        "function 'reader': blob binding 'b': unknown property 'bogus'",
    ),
    "unset setting": (
        """
@app.route(route="r")
@app.queue_output(arg_name="q", queue_name="%QUEUE_NAME%", connection="AppStorage")
def sender(req: func.HttpRequest, q: func.Out[str]) -> str:
    return "x"
""",
        {},
        (
            "function 'sender': queue binding 'q': queueName refers to the app setting %QUEUE_NAME%,"
            " which is not set"
        ),
    ),
    "bad host.json": (
        BLOB_ON_HTTP.replace("{conn}", "AppStorage"),
        {"AzureFunctionsJobHost__extensions__queues__batchSize": "64"},
        "host.json extensions.queues.batchSize=64 is out of range (1 to 32)",
    ),
}


def write_app(folder: Path, code: str, settings: dict[str, str]) -> Path:
    app = folder / "app"
    app.mkdir()
    (app / "function_app.py").write_text(HEAD + code)
    (app / "host.json").write_text(json.dumps({"version": "2.0"}))
    values = {"AppStorage": "UseDevelopmentStorage=true", **settings}
    (app / "local.settings.json").write_text(json.dumps({"IsEncrypted": False, "Values": values}))
    return app


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_refusal_names_the_function_the_binding_and_the_setting(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In-process: the start-up check the host runs before it opens its store."""
    code, settings, expected = CASES[case]
    app = write_app(tmp_path, code, settings)
    for key, value in {"AppStorage": "UseDevelopmentStorage=true", **settings}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setitem(sys.modules, "function_app", None)

    with pytest.raises(StorageConfigError) as found:
        storage_extension(loader.load_app(app), app, "hub")

    assert expected in str(found.value)


@pytest.mark.parametrize("case", ["malformed"])
def test_the_command_line_refuses_in_one_line_before_the_store_is_touched(
    case: str, tmp_path: Path
) -> None:
    code, settings, expected = CASES[case]
    app = write_app(tmp_path, code, settings)
    store = tmp_path / "hub.db"

    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "durable_host",
            "start",
            "--port",
            "0",
            "--app-dir",
            str(app),
            "--store",
            f"sqlite:{store}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )

    assert result.returncode == 2, result
    # (The SDK's own advice on auth levels, printed while the app imports, is not the host's.)
    lines = [line for line in result.stderr.splitlines() if line.strip() and " root " not in line]
    assert len(lines) == 1 and lines[0].startswith("durable host: "), result.stderr
    assert expected in lines[0]
    assert not store.exists()
