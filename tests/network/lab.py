"""A small network of Linux network namespaces for the network-fault tests.

Topology (every address private, every link a veth pair this module made; nothing leaves
the machine, the root namespace only gains one veth per namespace):

* ``store``: the store's namespace (PostgreSQL, Azurite listen on every address in it).
  It routes between the hosts' links (forwarding on in it only), so hosts could reach each
  other through it, as hosts on one subnet would.
* ``host i``: one host process. Its *store link* goes to the store namespace
  (``10.<n>.<i>.2`` - ``10.<n>.<i>.1``, its default route); its *control link* goes to the
  root namespace (``10.<n>.<100+i>.2``), where the test talks HTTP to it. Cutting the store
  link leaves the test able to ask the cut host what it believes.
* the root namespace reaches the store namespace on ``10.<n>.250.1`` (to read the database
  and run Azurite's checks).

Faults are ``nft`` rules in the host's own namespace, on its store link only: ``cut``
(drop everything to and from the store, silently, as a dead switch does: no reset, no
unreachable), ``isolate`` (drop what goes to and comes from the other hosts), ``lossy``
(drop a percentage of packets at random in both directions), ``heal``. Latency needs a
qdisc (``tc netem``); kernels without one (containers) get it from ``relay.py``, a
delaying TCP relay in the store namespace.

Cleanup: ``close`` kills what runs in the namespaces and deletes them (their veths go with
them); every namespace name carries the creating process's id, and ``sweep`` deletes those
of processes that are gone, so a test run that was killed leaves nothing for long.
Root is needed (``ip netns add``); ``available()`` says whether it works here.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import signal
import stat
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

PREFIX = "dhnet"
TIMEOUT = 20.0  # seconds for one ip/nft command


def run(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, check=check, capture_output=True, text=True, timeout=TIMEOUT)


def available() -> str | None:
    """None when namespaces can be made here, else why not."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "nft"):
        if run("sh", "-c", f"command -v {tool}", check=False).returncode != 0:
            return f"{tool} is not installed (Debian: iproute2, nftables)"
    name = f"{PREFIX}-{os.getpid()}-probe"
    probe = run("ip", "netns", "add", name, check=False)
    if probe.returncode != 0:
        return f"ip netns add failed: {probe.stderr.strip()}"
    run("ip", "netns", "del", name, check=False)
    return None


def sweep() -> None:
    """Delete namespaces of this module whose creating process is gone."""
    listed = run("ip", "netns", "list", check=False).stdout
    for line in listed.splitlines():
        name = line.split(" ", 1)[0]
        found = re.fullmatch(rf"{PREFIX}-(\d+)-\w+", name)
        if found and not Path(f"/proc/{found.group(1)}").exists():
            kill_namespace(name)


def kill_namespace(name: str) -> None:
    for pid in run("ip", "netns", "pids", name, check=False).stdout.split():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(pid), signal.SIGKILL)
    run("ip", "netns", "del", name, check=False)


def _free_octet() -> int:
    """A second octet for 10.x.0.0/16 that no address of the root namespace uses."""
    used = run("ip", "-o", "-4", "addr", "show", check=False).stdout
    taken = {int(m) for m in re.findall(r"inet 10\.(\d+)\.", used)}
    choices = [n for n in range(100, 250) if n not in taken]
    return random.choice(choices)


@dataclass
class Host:
    """One host's namespace and its two links."""

    index: int
    netns: str
    store_if: str  # the host's end of its store link, inside its namespace
    address: str  # where the test reaches the host (control link)
    store_side: str  # the store namespace's address on this host's store link
    python: Path  # an interpreter that runs inside the namespace
    faults: list[str] = field(default_factory=list)  # what is applied now

    def nft(self, script: str) -> None:
        subprocess.run(
            ["ip", "netns", "exec", self.netns, "nft", "-f", "-"],
            input=script,
            check=True,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )


class Lab:
    """The namespaces of one test (module docstring)."""

    def __init__(self, tmp: Path) -> None:
        sweep()
        self.tmp = tmp
        self.tag = f"{PREFIX}-{os.getpid()}-{random.randrange(16**4):04x}"
        self.n = _free_octet()
        self.short = f"{random.randrange(16**4):04x}"  # interface names are 15 bytes at most
        self.store = f"{self.tag}s"
        self.store_address = f"10.{self.n}.250.1"
        self.hosts: list[Host] = []
        self._made: list[str] = []
        self._ns(self.store)
        self._link(
            f"d{self.short}r",
            None,
            f"10.{self.n}.250.2",
            f"d{self.short}R",
            self.store,
            self.store_address,
        )
        self._in(self.store, "sysctl", "-qw", "net.ipv4.ip_forward=1")

    # --- building -----------------------------------------------------------------------

    def _ns(self, name: str) -> None:
        run("ip", "netns", "add", name)
        self._made.append(name)
        self._in(name, "ip", "link", "set", "lo", "up")

    def _in(self, netns: str, *argv: str) -> None:
        run("ip", "netns", "exec", netns, *argv)

    def _link(self, a: str, a_ns: str | None, a_addr: str, b: str, b_ns: str, b_addr: str) -> None:
        run("ip", "link", "add", a, "type", "veth", "peer", "name", b)
        for name, netns, address in ((a, a_ns, a_addr), (b, b_ns, b_addr)):
            if netns is not None:
                run("ip", "link", "set", name, "netns", netns)
            prefix = ["ip", "-n", netns] if netns else ["ip"]
            run(*prefix, "addr", "add", f"{address}/30", "dev", name)
            run(*prefix, "link", "set", name, "up")

    def add_host(self) -> Host:
        i = len(self.hosts)
        netns = f"{self.tag}h{i}"
        self._ns(netns)
        store_if = f"d{self.short}h{i}"
        self._link(
            f"d{self.short}s{i}",
            self.store,
            f"10.{self.n}.{i}.1",
            store_if,
            netns,
            f"10.{self.n}.{i}.2",
        )
        self._link(
            f"d{self.short}c{i}",
            None,
            f"10.{self.n}.{100 + i}.1",
            f"d{self.short}k{i}",
            netns,
            f"10.{self.n}.{100 + i}.2",
        )
        run("ip", "-n", netns, "route", "add", "default", "via", f"10.{self.n}.{i}.1")
        # The store namespace answers the hosts through their own links.
        host = Host(
            i,
            netns,
            store_if,
            f"10.{self.n}.{100 + i}.2",
            f"10.{self.n}.{i}.1",
            self.wrapper(netns),
        )
        self.hosts.append(host)
        return host

    def wrapper(
        self, netns: str, program: str = sys.executable, *, path_first: Path | None = None
    ) -> Path:
        """An executable that runs ``program`` inside ``netns`` (for ``HostProcess.python``
        and the like, which take one path); ``path_first``: a folder put first on its
        ``PYTHONPATH`` (e.g. for a ``sitecustomize``)."""
        path = self.tmp / f"in-{netns}-{Path(program).name}{'-site' if path_first else ''}"
        env = f'PYTHONPATH="{path_first}:$PYTHONPATH" ' if path_first else ""
        path.write_text(f'#!/bin/sh\n{env}exec ip netns exec {netns} {program} "$@"\n')
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
        return path

    # --- faults -------------------------------------------------------------------------

    def _apply(self, host: Host, out: list[str], into: list[str], what: str) -> None:
        def chain(name: str, hook: str, rules: list[str]) -> str:
            lines = "".join(f"    {rule}\n" for rule in rules)
            return f"  chain {name} {{ type filter hook {hook} priority 0; policy accept;\n{lines}  }}\n"

        host.nft(
            "table inet dhfault\ndelete table inet dhfault\n"
            "table inet dhfault {\n"
            + chain("out", "output", out)
            + chain("in", "input", into)
            + "}\n"
        )
        host.faults = [what] if out or into else []

    def cut(self, host: Host) -> None:
        """Silently drop everything between the host and the store (its store link)."""
        self._apply(
            host, [f'oifname "{host.store_if}" drop'], [f'iifname "{host.store_if}" drop'], "cut"
        )

    def isolate(self, host: Host) -> None:
        """Drop what goes between the host and the other hosts; the store stays reachable."""
        others = [f"10.{self.n}.{h.index}.2" for h in self.hosts if h is not host]
        others += [f"10.{self.n}.{100 + h.index}.2" for h in self.hosts if h is not host]
        if not others:
            return
        group = ", ".join(others)
        self._apply(
            host, [f"ip daddr {{ {group} }} drop"], [f"ip saddr {{ {group} }} drop"], "isolated"
        )

    def lossy(self, host: Host, percent: int) -> None:
        """Drop ``percent`` % of the packets on the store link, at random, both ways."""
        rule = f"numgen random mod 100 < {percent} drop"
        self._apply(
            host,
            [f'oifname "{host.store_if}" {rule}'],
            [f'iifname "{host.store_if}" {rule}'],
            f"loss {percent}%",
        )

    def heal(self, host: Host) -> None:
        self._apply(host, [], [], "")

    # --- end ----------------------------------------------------------------------------

    def close(self) -> None:
        for name in reversed(self._made):
            kill_namespace(name)
        self._made.clear()
