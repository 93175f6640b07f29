"""The stores of the network-fault tests, inside the lab's store namespace (``lab``).

``NetPostgres`` is the tests' private PostgreSQL server (``tests/postgres_server.py``)
started inside the store namespace, listening on every address there, with password
logins allowed from the lab's subnet. ``NetAzurite`` is an in-memory Azurite there.
Each gives a connection setting per host (``for_host``): host 0 goes through the delaying
relay (``relay.py``, no delay until ``delay`` sets one), the others straight to the store.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

from durable_host.ops import azurite
from tests.network.lab import Host, Lab
from tests.postgres_server import PostgresServer, find_bindir

RELAY = Path(__file__).resolve().parent / "relay.py"


def answers(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=0.5):
            return True
    except OSError:
        return False


class Relays:
    """The delaying relay of the lab (module docstring), in the store namespace."""

    def __init__(self, lab: Lab, targets: tuple[int, ...], tmp: Path) -> None:
        self.delay_file = tmp / "relay-delay"
        self.delay_file.write_text("")
        # the store's port -> the relay's (the store namespace is empty but for the store)
        self.ports = dict(zip(targets, azurite.free_ports(len(targets)), strict=True))
        argv = [str(self.delay_file)]
        argv += [f"0.0.0.0:{r}=127.0.0.1:{t}" for t, r in self.ports.items()]
        self.process = subprocess.Popen(
            ["ip", "netns", "exec", lab.store, sys.executable, str(RELAY), *argv],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        assert "relay ready" in self.process.stdout.readline()

    def delay(self, text: str) -> None:
        """``"100-300"`` ms on every chunk from now on; ``""`` none."""
        self.delay_file.write_text(text)
        time.sleep(0.6)  # the relay reads the file every half second

    def stop(self) -> None:
        self.process.kill()
        self.process.wait(10)


class NetPostgres(PostgresServer):
    def __init__(self, lab: Lab) -> None:
        bindir = find_bindir()
        assert bindir is not None
        super().__init__(bindir)
        self.lab = lab
        self._as = ["ip", "netns", "exec", lab.store, *self._as]
        self.relays: Relays | None = None

    def pg_ctl(self, *command: str) -> None:
        hba = self.data / "pg_hba.conf"
        line = f"host all all 10.{self.lab.n}.0.0/16 scram-sha-256\n"
        if hba.exists() and line not in hba.read_text():
            with hba.open("a") as f:
                f.write(line)
        options = (
            f"-p {self.port} -c listen_addresses=* -c unix_socket_directories={self.root}"
            " -c max_connections=300"
        )
        self._run(
            str(self.bindir / "pg_ctl"),
            *command,
            "-D",
            str(self.data),
            "-l",
            str(self.log),
            "-o",
            options,
            "-w",
            "-t",
            "60",
        )

    @property
    def url(self) -> str:
        return self.url_at(self.lab.store_address, self.port)

    def url_at(self, address: str, port: int) -> str:
        return f"postgresql://{self.user}:{self.password}@{address}:{port}/postgres"

    def start_relay(self, tmp: Path) -> None:
        self.relays = Relays(self.lab, (self.port,), tmp)

    def for_host(self, host: Host) -> dict[str, str]:
        port = self.relays.ports[self.port] if host.index == 0 and self.relays else self.port
        return {"DURABLE_HOST_POSTGRES": self.url_at(host.store_side, port)}

    def stop(self) -> None:
        if self.relays:
            self.relays.stop()
        super().stop()


class NetAzurite:
    def __init__(self, lab: Lab, tmp: Path) -> None:
        self.lab = lab
        self.ports = azurite.free_ports(3)
        exe = azurite.find_executable()
        assert exe is not None, "Azurite is not installed (npm ci)"
        log = (tmp / "azurite.log").open("ab")
        self.process = subprocess.Popen(
            [
                "ip",
                "netns",
                "exec",
                lab.store,
                str(exe),
                "--silent",
                "--skipApiVersionCheck",
                "--loose",
                "--disableTelemetry",
                "--inMemoryPersistence",
                "--blobHost",
                "0.0.0.0",
                "--queueHost",
                "0.0.0.0",
                "--tableHost",
                "0.0.0.0",
                "--blobPort",
                str(self.ports[0]),
                "--queuePort",
                str(self.ports[1]),
                "--tablePort",
                str(self.ports[2]),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while not all(answers(lab.store_address, p) for p in self.ports):
            assert self.process.poll() is None, "Azurite exited while starting"
            assert time.monotonic() < deadline, "Azurite did not answer within 60 s"
            time.sleep(0.1)
        self.relays: Relays | None = None

    def start_relay(self, tmp: Path) -> None:
        self.relays = Relays(self.lab, tuple(self.ports), tmp)

    def for_host(self, host: Host) -> dict[str, str]:
        ports = self.ports
        if host.index == 0 and self.relays:
            ports = tuple(self.relays.ports[p] for p in ports)
        blob, queue, table = ports
        return {
            "AzureWebJobsStorage": azurite.connection_string(host.store_side, (blob, queue, table))
        }

    def stop(self) -> None:
        if self.relays:
            self.relays.stop()
        self.process.kill()
        self.process.wait(10)
