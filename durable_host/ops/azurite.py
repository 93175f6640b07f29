"""Find or start Azurite, the local Azure Storage emulator, for the Azure store.

Contract:

* ``ensure(setting, location)`` does nothing unless the setting is the development
  storage shorthand (``UseDevelopmentStorage=true``) and nothing answers on
  127.0.0.1:10000-10002. Then it starts Azurite from the project's pinned npm package
  (``node_modules/.bin/azurite`` next to ``package.json``; install it with ``npm ci``),
  persisting to ``location``, waits until all three services answer, and returns a
  handle whose ``stop()`` ends it. An Azurite that is already running is used as it is
  and never stopped by us.
* The started Azurite runs in its own session (a Ctrl-C in the terminal reaches the host
  first, which stops Azurite after its own graceful stop) and, on Linux, receives SIGTERM
  when its parent dies, so it never outlives a killed host; SIGTERM makes Azurite save
  its state before it exits.
* ``start(...)`` is the same launcher with explicit ports, for test suites that run
  their own emulator (``in_memory`` keeps nothing on disk).

Only the Azure store imports this module: the SQLite store never needs Azurite.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEV_ACCOUNT = "devstoreaccount1"
# The emulator's fixed, publicly documented account key (not a secret).
DEV_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
DEFAULT_PORTS = (10000, 10001, 10002)  # blob, queue, table
START_TIMEOUT = 30.0


class AzuriteError(Exception):
    pass


def is_development_storage(setting: str) -> bool:
    parts = {
        k.strip().lower(): v.strip().lower()
        for k, _, v in (p.partition("=") for p in setting.split(";") if p.strip())
    }
    return parts.get("usedevelopmentstorage") == "true"


def connection_string(host: str = "127.0.0.1", ports: tuple[int, int, int] = DEFAULT_PORTS) -> str:
    blob, queue, table = ports
    return (
        f"DefaultEndpointsProtocol=http;AccountName={DEV_ACCOUNT};AccountKey={DEV_KEY};"
        f"BlobEndpoint=http://{host}:{blob}/{DEV_ACCOUNT};"
        f"QueueEndpoint=http://{host}:{queue}/{DEV_ACCOUNT};"
        f"TableEndpoint=http://{host}:{table}/{DEV_ACCOUNT};"
    )


def answers(host: str, ports: tuple[int, ...], timeout: float = 0.5) -> bool:
    """True when every port accepts a TCP connection."""
    for port in ports:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                pass
        except OSError:
            return False
    return True


def free_ports(count: int = 3) -> tuple[int, ...]:
    """Ports the OS reports free right now (for test emulators)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return tuple(s.getsockname()[1] for s in sockets)
    finally:
        for s in sockets:
            s.close()


def find_executable(extra_roots: tuple[Path, ...] = ()) -> Path | None:
    for root in (*extra_roots, ROOT):
        candidate = root / "node_modules" / ".bin" / "azurite"
        if candidate.is_file():
            return candidate
    found = shutil.which("azurite")
    return Path(found) if found else None


# Loaded in the parent: between fork and exec the child only makes the one prctl call.
_LIBC = ctypes.CDLL(None) if sys.platform.startswith("linux") else None


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    if _LIBC is not None:
        PR_SET_PDEATHSIG = 1
        _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


@dataclass
class Azurite:
    process: subprocess.Popen[bytes]
    host: str
    ports: tuple[int, int, int]
    location: Path | None

    @property
    def connection_string(self) -> str:
        return connection_string(self.host, self.ports)

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM (Azurite saves and exits), then SIGKILL after ``timeout`` seconds."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        return self.process.returncode

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(5)


def start(
    location: Path | None,
    ports: tuple[int, int, int] = DEFAULT_PORTS,
    host: str = "127.0.0.1",
    *,
    in_memory: bool = False,
    executable: Path | None = None,
    log: Path | None = None,
    timeout: float = START_TIMEOUT,
) -> Azurite:
    exe = executable or find_executable()
    if exe is None:
        raise AzuriteError(
            f"Azurite is not installed: run `npm ci` in {ROOT} (package.json pins it),"
            " or start an Azure Storage emulator yourself."
        )
    args = [
        str(exe),
        "--silent",
        "--skipApiVersionCheck",
        "--loose",
        "--disableTelemetry",
        "--blobHost",
        host,
        "--queueHost",
        host,
        "--tableHost",
        host,
        "--blobPort",
        str(ports[0]),
        "--queuePort",
        str(ports[1]),
        "--tablePort",
        str(ports[2]),
    ]
    if in_memory:
        args.append("--inMemoryPersistence")
    else:
        assert location is not None, "a location is needed unless in_memory"
        location.mkdir(parents=True, exist_ok=True)
        args += ["--location", str(location)]
    out = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115 - owned by the child
    process = subprocess.Popen(
        args,
        stdin=subprocess.DEVNULL,
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        # No other way to have the emulator die with the host; the hook only calls prctl.
        preexec_fn=_die_with_parent,  # noqa: PLW1509
    )
    emulator = Azurite(process, host, ports, location)
    deadline = time.monotonic() + timeout
    while not answers(host, ports, 0.2):
        if process.poll() is not None:
            raise AzuriteError(f"Azurite exited with status {process.returncode} while starting")
        if time.monotonic() > deadline:
            emulator.kill()
            raise AzuriteError(f"Azurite did not answer on {host}:{ports} within {timeout}s")
        time.sleep(0.05)
    return emulator


def ensure(setting: str, location: Path) -> Azurite | None:
    """Start Azurite for ``UseDevelopmentStorage=true`` when none answers (see module doc)."""
    if not is_development_storage(setting):
        return None
    if answers("127.0.0.1", DEFAULT_PORTS):
        return None
    if any(answers("127.0.0.1", (p,)) for p in DEFAULT_PORTS):
        raise AzuriteError(
            "Some of the ports 10000-10002 answer and some do not: another program holds"
            " part of the Azure Storage emulator's ports."
        )
    return start(location, DEFAULT_PORTS, log=location / "azurite.log")


def resolve_setting(setting: str) -> str:
    """The development storage shorthand as a full connection string, else unchanged."""
    return connection_string() if is_development_storage(setting) else setting


if __name__ == "__main__":  # pragma: no cover - manual use: run an emulator in the foreground
    emulator = start(Path(os.environ.get("AZURITE_LOCATION", ".durable/azurite")))
    print(emulator.connection_string, flush=True)
    try:
        emulator.process.wait()
    except KeyboardInterrupt:
        emulator.stop()
