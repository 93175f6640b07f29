"""``run_python``: a snippet run in a child process with limits, in a workspace directory.

Contract: ``run(code, cwd, limits) -> RunResult``; never raises for what the snippet does.

* the child is this interpreter in isolated mode (``-I``: no ``PYTHON*`` variables, no user
  site, the snippet's directory not on ``sys.path``), its working directory the workspace;
* its environment is built from nothing: ``PATH``, ``HOME`` (the workspace), ``LANG``,
  ``TMPDIR`` (a directory outside the workspace, removed afterwards) - none of the app's
  settings or secrets;
* limits (``setrlimit`` before the snippet starts): CPU seconds, address space, the size of a
  file it writes, the number of processes, open files; a wall-time limit kills the child's whole
  process group; the child also dies with its parent (``PR_SET_PDEATHSIG``), so a killed host
  leaves no snippet writing into a workspace it no longer owns;
* output: stdout and stderr go to files outside the workspace (capped by the file-size limit)
  and at most ``output_bytes`` of each is returned, with ``truncated`` set;
* network: on Linux the child gets new user and network namespaces (``unshare``), so it has no
  network interface but loopback of its own; where the platform refuses that (no user
  namespaces), it runs with the host's network and ``network`` says ``"not isolated"``.

Not isolated (docs/workspace.md): the file system outside the workspace (the child runs as the
app's user and can read what that user can read, e.g. the app's code), other processes of that
user (signals), and - where ``network`` is ``"not isolated"`` - the network. It is a limit on
mistakes and runaway snippets, not a boundary against a hostile one.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True, slots=True)
class SandboxLimits:
    cpu_s: int = 10
    memory_bytes: int = 512 * 1024 * 1024
    file_bytes: int = 4 * 1024 * 1024
    processes: int = 64
    wall_s: float = 30.0
    output_bytes: int = 8 * 1024

    @classmethod
    def from_env(cls) -> SandboxLimits:
        def number(name: str, default: float) -> float:
            try:
                value = float(os.environ.get(name) or default)
            except ValueError:
                return default
            return value if value > 0 else default

        defaults = cls()
        return cls(
            cpu_s=int(number("AGENT_SANDBOX_CPU_S", defaults.cpu_s)),
            memory_bytes=int(number("AGENT_SANDBOX_MEMORY_BYTES", defaults.memory_bytes)),
            file_bytes=int(number("AGENT_SANDBOX_FILE_BYTES", defaults.file_bytes)),
            processes=int(number("AGENT_SANDBOX_PROCESSES", defaults.processes)),
            wall_s=number("AGENT_SANDBOX_WALL_S", defaults.wall_s),
            output_bytes=int(number("AGENT_SANDBOX_OUTPUT_BYTES", defaults.output_bytes)),
        )


@dataclass(frozen=True, slots=True)
class RunResult:
    exit_code: int | None
    stdout: str
    stderr: str
    truncated: bool
    stopped: str | None  # why the child was stopped: cpu | memory | file_size | wall_time
    network: str  # "isolated" | "not isolated"
    elapsed_s: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# The child's first program: it limits itself, then becomes the snippet (``execv``). Doing
# this in a launcher rather than in a ``preexec_fn`` keeps the forked child of a threaded host
# from running Python before ``exec``, where a lock held by another thread could hang it.
_LAUNCHER = """
import ctypes, os, resource, signal, sys
parent, isolate, cpu, memory, fsize, nproc = (int(a) for a in sys.argv[1:7])
libc = ctypes.CDLL(None, use_errno=True)
libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: die with the host
if os.getppid() != parent:
    sys.exit(70)  # the host died before the line above
if isolate and libc.unshare(0x10000000 | 0x40000000) != 0:  # CLONE_NEWUSER | CLONE_NEWNET
    sys.exit(71)
resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
os.execv(sys.executable, [sys.executable, "-I", *sys.argv[7:]])
"""


def _command(scratch: Path, limits: SandboxLimits, isolate: bool, *rest: str) -> list[str]:
    launcher = scratch / "launcher.py"
    if not launcher.exists():
        launcher.write_text(_LAUNCHER, encoding="utf-8")
    numbers = (
        os.getpid(),
        int(isolate),
        limits.cpu_s,
        limits.memory_bytes,
        limits.file_bytes,
        limits.processes,
    )
    return [sys.executable, "-I", str(launcher), *(str(n) for n in numbers), *rest]


def _network_probe() -> bool:
    """Whether this platform lets an unprivileged child unshare its network."""
    if not sys.platform.startswith("linux"):
        return False
    with tempfile.TemporaryDirectory(prefix="sandbox-probe-") as scratch:
        command = _command(Path(scratch), SandboxLimits(), True, "-c", "pass")
        probe = subprocess.run(command, capture_output=True, check=False, timeout=30)
    return probe.returncode == 0


_NETWORK_ISOLATION: bool | None = None


def network_isolation() -> bool:
    global _NETWORK_ISOLATION
    if _NETWORK_ISOLATION is None:
        try:
            _NETWORK_ISOLATION = _network_probe()
        except (OSError, subprocess.SubprocessError):
            _NETWORK_ISOLATION = False
    return _NETWORK_ISOLATION


def run(code: str, cwd: Path, limits: SandboxLimits) -> RunResult:
    """Run ``code`` with ``cwd`` as its working directory under ``limits``."""
    isolate = network_isolation()
    with tempfile.TemporaryDirectory(prefix="sandbox-") as scratch:
        scratch_dir = Path(scratch)
        (scratch_dir / "snippet.py").write_text(code, encoding="utf-8")
        tmp = scratch_dir / "tmp"
        tmp.mkdir()
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": str(cwd),
            "LANG": "C.UTF-8",
            "TMPDIR": str(tmp),
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        started = time.monotonic()
        with (scratch_dir / "out").open("wb") as out, (scratch_dir / "err").open("wb") as err:
            child = subprocess.Popen(
                _command(scratch_dir, limits, isolate, str(scratch_dir / "snippet.py")),
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
            wall_hit = False
            try:
                child.wait(timeout=limits.wall_s)
            except subprocess.TimeoutExpired:
                wall_hit = True
                os.killpg(child.pid, signal.SIGKILL)
                child.wait()
            _kill_group(child.pid)  # whatever the snippet started in the background
        elapsed = time.monotonic() - started
        stdout, cut_out = _head(scratch_dir / "out", limits.output_bytes)
        stderr, cut_err = _head(scratch_dir / "err", limits.output_bytes)
    code_ = child.returncode
    return RunResult(
        exit_code=code_,
        stdout=stdout,
        stderr=stderr,
        truncated=cut_out or cut_err,
        stopped="wall_time" if wall_hit else _stopped(code_, stderr),
        network="isolated" if isolate else "not isolated",
        elapsed_s=round(elapsed, 3),
    )


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _stopped(returncode: int | None, stderr: str) -> str | None:
    if returncode == -signal.SIGXCPU or returncode == -signal.SIGKILL:
        return "cpu"  # the soft limit sends SIGXCPU, the hard one SIGKILL
    if returncode == -signal.SIGXFSZ or "File too large" in stderr:
        return "file_size"
    if "MemoryError" in stderr:
        return "memory"
    return None


def _head(path: Path, limit: int) -> tuple[str, bool]:
    with path.open("rb") as file:
        data = file.read(limit + 1)
    return data[:limit].decode("utf-8", errors="replace"), len(data) > limit
