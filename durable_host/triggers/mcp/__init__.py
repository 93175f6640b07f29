"""The Functions MCP extension: the app's tool, resource and prompt triggers served to any
MCP client at ``/runtime/webhooks/mcp`` (``docs/mcp.md``; the behaviours copied from the
extension, with their sources, in ``docs/extension-semantics.md``).

* ``catalog``    the declarations the Python library writes, as ``tools/list``,
                 ``resources/list``, ``resources/templates/list`` and ``prompts/list`` show them;
* ``calls``      calling a function with the trigger value the extension passes;
* ``results``    a function's return value as the protocol's result;
* ``protocol``   the JSON-RPC methods, whatever the transport;
* ``sessions``   session ids every host of the task hub accepts;
* ``relay``      the legacy SSE transport's messages to the host holding the stream;
* ``transport``  Streamable HTTP and the legacy SSE transport over aiohttp.

``open_routes`` builds the whole for an app (None when it declares nothing of MCP); a
declaration it cannot serve stops the start with ``CatalogError`` naming the function, a
``DURABLE_HOST_MCP_RESPONSE`` other than ``sse`` (the default) or ``json`` with
``ConfigError``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

from durable_host.functions.loader import FunctionInfo
from durable_host.http.keys import SecretStore
from durable_host.http.limits import Limits
from durable_host.ops.settings import ConfigError
from durable_host.triggers.mcp.calls import Caller
from durable_host.triggers.mcp.catalog import Catalog, CatalogError
from durable_host.triggers.mcp.protocol import Server, Settings
from durable_host.triggers.mcp.sessions import Sessions
from durable_host.triggers.mcp.transport import BASE, McpRoutes

RESPONSE_SETTING = "DURABLE_HOST_MCP_RESPONSE"  # how Streamable HTTP answers: sse | json
__all__ = ["BASE", "CatalogError", "McpRoutes", "Settings", "open_routes", "settings_of"]


def settings_of(app_dir: Path) -> Settings:
    """host.json ``extensions.mcp`` (host.json itself was checked by ``functions.config``)."""
    path = Path(app_dir) / "host.json"
    data = json.loads(path.read_text()) if path.is_file() else {}
    return Settings.from_host_json(data if isinstance(data, dict) else {})


async def open_routes(
    functions: list[FunctionInfo],
    app_dir: Path,
    store: SecretStore,
    limits: Limits,
    client_json: Callable[[], str],
) -> McpRoutes | None:
    if not functions:
        return None
    response = os.environ.get(RESPONSE_SETTING, "").strip().lower() or "sse"
    if response not in ("sse", "json"):
        raise ConfigError(f"{RESPONSE_SETTING}={response[:40]!r} is not sse or json")
    catalog = Catalog.build(functions)
    server = Server(catalog, Caller(client_json, str(app_dir)), settings_of(app_dir))
    sessions = Sessions(store)
    await sessions.load()
    return McpRoutes(server, sessions, limits, json_responses=response == "json")
