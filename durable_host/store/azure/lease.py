"""Who holds a lease: the identity of a host process, and whether it is a dead one here.

A holder of a partition lease (``partitions.py``) records ``process_identity`` in the
lease blob's metadata; a host that finds a lease held by a process of this very machine
that no longer exists (``is_dead_process_here``) releases exactly that lease id and takes
over at once, so a host restarted after a crash does not wait out the lease. A stopped
(SIGSTOP) process still exists, so it is waited out.

``DURABLE_HOST_MACHINE_NAME`` replaces the host name in the identity: hosts that name
different machines never release each other's leases (each waits for a dead one's lease
to lapse), while a host restarted with the same name takes over at once. For hosts that
share one kernel but stand for separate machines (tests, campaigns); unset, the host name.

``LEASE_MARGIN``: the seconds of a lease a host never relies on (clock rate, request
latency): it trusts a lease until the sent-time of its last renewal + duration - margin.
``STANDBY_POLL``: how often a host waiting for a hub held by the single-lease version
looks again.
"""

from __future__ import annotations

import os
import socket

LEASE_MARGIN = 3.0  # seconds of a lease we never rely on (clock rate, request latency)
STANDBY_POLL = 2.0  # how often a standby host tries to take the lease


def process_identity() -> str:
    """``host|boot|pid-namespace|pid``: enough to tell, on the same machine, whether a
    recorded lease holder is a process that no longer exists."""
    boot = _read("/proc/sys/kernel/random/boot_id")
    try:
        namespace = str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        namespace = ""
    machine = os.environ.get("DURABLE_HOST_MACHINE_NAME") or socket.gethostname()
    return f"{machine}|{boot}|{namespace}|{os.getpid()}"


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def is_dead_process_here(identity: str) -> bool:
    """Is ``identity`` (a ``process_identity``) a process of this machine that is gone?"""
    parts = identity.split("|")
    mine = process_identity().split("|")
    if len(parts) < 4 or not parts[1] or not parts[2] or parts[:3] != mine[:3]:
        return False  # another machine, or one we cannot judge: wait for the lease to expire
    stat = _read(f"/proc/{parts[3]}/stat")
    if not stat:
        return True
    return stat.rpartition(")")[2].split()[0] in ("Z", "X")  # a zombie is dead too
