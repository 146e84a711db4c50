"""Two Linux network namespaces standing in for two machines, for real multi-machine runs.

Each namespace has its loopback up and one end of a veth pair (10.77.0.1/24 and
10.77.0.2/24), created directly inside the namespaces: no link to the root namespace, no
default route, so nothing reaches them from outside and nothing of theirs leaves. The pair
is created once per session and deleted at its end, even after a failure; every process
started in a namespace is killed after each test (``ip netns pids``), so none outlives it.
Creating namespaces needs root (CAP_SYS_ADMIN) and iproute2: without them every test here
is skipped, naming the reason.
"""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
SCRIPTS = Path(__file__).parent / "scripts"
ADDRESSES = ("10.77.0.1", "10.77.0.2")
_PORTS = itertools.count(29610)


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20,
                          check=check)


def worker_env() -> dict[str, str]:
    """The test's environment without the variables a launcher or a config would set."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ACCEL_", "ACCELERATE_", "TORCHELASTIC_", "SLURM_"))
           and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env["PYTHONUNBUFFERED"] = "1"
    return env


@dataclass
class Launched:
    """One `accel launch` started in a namespace (``popen``), its output once ended."""

    machine: int
    popen: subprocess.Popen[str]
    machines: Machines | None = None
    started: float = field(default_factory=time.monotonic)
    ended: float | None = None
    stdout: str = ""
    stderr: str = ""

    @property
    def returncode(self) -> int | None:
        return self.popen.returncode

    def finish(self, timeout: float) -> Launched:
        """Wait for the exit (killing it after ``timeout`` s, which fails the test)."""
        try:
            self.stdout, self.stderr = self.popen.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            if self.machines is not None:  # its workers and guard hold the output pipes too
                self.machines.kill_all()
            self.stdout, self.stderr = self.popen.communicate(timeout=30)
            pytest.fail(f"machine {self.machine}'s launcher did not exit within {timeout} s\n"
                        + self.explain())
        self.ended = self.ended or time.monotonic()
        return self

    def explain(self) -> str:
        return (f"machine {self.machine}: exit {self.popen.returncode}\n--- stdout\n"
                f"{self.stdout[-4000:]}\n--- stderr\n{self.stderr[-8000:]}")


@dataclass
class Machines:
    """The namespace pair: ``names[i]`` holds ``ADDRESSES[i]``."""

    names: tuple[str, str]
    interfaces: tuple[str, str]
    """The veth end of each namespace: its GLOO_SOCKET_IFNAME (the hostname of these test
    machines resolves to loopback, which gloo would otherwise advertise to the peers)."""
    addresses: tuple[str, str] = ADDRESSES
    """The address of each namespace on the veth pair."""

    def new_port(self) -> int:
        return next(_PORTS)

    def launch(self, machine: int, *args: str, env: dict[str, str | None] | None = None
               ) -> Launched:
        """Start ``accel launch ARGS`` in namespace ``machine`` (output collected by
        :meth:`Launched.finish`)."""
        return self.start(machine, [sys.executable, "-m", "accel_launch", "launch", *args],
                          env)

    def start(self, machine: int, argv: Sequence[str],
              env: dict[str, str | None] | None = None) -> Launched:
        """Start ``argv`` in namespace ``machine``; ``env`` adds variables to the test's
        (a None value removes one)."""
        cmd = ["ip", "netns", "exec", self.names[machine], *argv]
        merged = {**worker_env(), "GLOO_SOCKET_IFNAME": self.interfaces[machine], **(env or {})}
        env = {k: v for k, v in merged.items() if v is not None}
        popen = subprocess.Popen(cmd, cwd=REPO, env=env, text=True,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 start_new_session=True)
        return Launched(machine, popen, self)

    def pair(self, args_of: Sequence[Sequence[str]]) -> list[Launched]:
        """One launcher per namespace, ``args_of[i]`` for machine i."""
        return [self.launch(i, *args) for i, args in enumerate(args_of)]

    def pids(self, machine: int) -> list[int]:
        """Every process alive in that namespace."""
        out = _ip("netns", "pids", self.names[machine], check=False).stdout
        return [int(p) for p in out.split() if p.strip().isdigit()]

    def kill_all(self) -> None:
        for machine in range(len(self.names)):
            for pid in self.pids(machine):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


def _create(names: tuple[str, str], veth: tuple[str, str]) -> None:
    for name in names:
        _ip("netns", "add", name)
    _ip("link", "add", veth[0], "netns", names[0], "type", "veth", "peer", "name", veth[1],
        "netns", names[1])
    for name, dev, address in zip(names, veth, ADDRESSES, strict=True):
        _ip("-n", name, "addr", "add", f"{address}/24", "dev", dev)
        _ip("-n", name, "link", "set", dev, "up")
        _ip("-n", name, "link", "set", "lo", "up")


@pytest.fixture(scope="session")
def _namespaces() -> Iterator[Machines]:
    if not sys.platform.startswith("linux") or shutil.which("ip") is None:
        pytest.skip("multi-machine tests need Linux network namespaces and iproute2's `ip`")
    tag = str(os.getpid())[-7:]
    names = (f"accel-mm-{tag}-0", f"accel-mm-{tag}-1")
    machines = Machines(names, (f"amm{tag}a", f"amm{tag}b"))
    try:
        _create(names, machines.interfaces)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
        reason = getattr(exc, "stderr", "") or str(exc)
        for name in names:
            _ip("netns", "del", name, check=False)
        pytest.skip(f"cannot create network namespaces (needs root / CAP_SYS_ADMIN): "
                    f"{str(reason).strip()}")
    try:
        yield machines
    finally:
        machines.kill_all()
        for name in names:
            _ip("netns", "del", name, check=False)


@pytest.fixture
def machines(_namespaces: Machines) -> Iterator[Machines]:
    """The shared namespace pair; whatever a test started in it is killed afterwards."""
    try:
        yield _namespaces
    finally:
        _namespaces.kill_all()


@pytest.fixture
def two_machine_flags(machines: Machines) -> list[list[str]]:
    """The flags of a static 2x1 CPU launch on a fresh port, per machine."""
    port = str(machines.new_port())
    return [["--cpu", "--num_machines", "2", "--machine_rank", str(rank), "--num_processes",
             "2", "--main_process_ip", ADDRESSES[0], "--main_process_port", port]
            for rank in (0, 1)]
