"""The ``Host`` section of ``local.settings.json``, read as Core Tools reads it (pure).

``LocalHttpPort`` (the port when ``--port`` is not given), ``CORS`` (comma-separated
origins, ``*`` for any) and ``CORSCredentials`` (true: answers allow credentials). The
command line wins over the file, as with ``func start``. ``Values`` are applied by
``config.apply_local_settings``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from durable_host.functions.config import ConfigError


@dataclass(frozen=True, slots=True)
class LocalHost:
    port: int | None = None
    cors: tuple[str, ...] = ()
    cors_credentials: bool = False


def read(app_dir: Path) -> LocalHost:
    path = Path(app_dir) / "local.settings.json"
    if not path.is_file():
        return LocalHost()
    try:
        data = json.loads(path.read_text())
    except ValueError as exc:
        raise ConfigError(f"{path} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a JSON object")
    return parse(path, data.get("Host"))


def parse(path: Path, section: Any) -> LocalHost:
    if section is None:
        return LocalHost()
    if not isinstance(section, dict):
        raise ConfigError(f"{path}: Host must be an object")
    port = section.get("LocalHttpPort")
    if port is not None:
        try:
            port = int(port)
        except (TypeError, ValueError):
            port = -1
        if not 0 <= port <= 65535:
            raise ConfigError(
                f"{path}: Host.LocalHttpPort {section['LocalHttpPort']!r} is not a port number"
            )
    cors = section.get("CORS") or ""
    if not isinstance(cors, str):
        raise ConfigError(f"{path}: Host.CORS must be a string of comma-separated origins")
    credentials = section.get("CORSCredentials", False)
    if isinstance(credentials, str) and credentials.lower() in ("true", "false"):
        credentials = credentials.lower() == "true"
    if not isinstance(credentials, bool):
        raise ConfigError(f"{path}: Host.CORSCredentials must be true or false")
    return LocalHost(port, split_origins(cors), credentials)


def split_origins(text: str) -> tuple[str, ...]:
    return tuple(o.strip().rstrip("/") for o in text.split(",") if o.strip())
