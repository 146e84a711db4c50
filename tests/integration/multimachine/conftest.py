"""Two Linux network namespaces standing in for two machines, for real multi-machine runs.

Each namespace has its loopback up and one end of a veth pair (10.77.0.1/24 and
10.77.0.2/24), created directly inside the namespaces: no link to the root namespace, no
default route, so nothing reaches them from outside and nothing of theirs leaves. The pair
is created once per session and deleted at its end, even after a failure; every process
started in a namespace is killed after each test (``ip netns pids``), so none outlives it.
Creating namespaces needs root (CAP_SYS_ADMIN) and iproute2: without them every test here
is skipped, naming the reason.

Three machines (``three_machines``) are a trio of their own, made only when a test asks for
it: a bridge in the first namespace (10.78.0.1/24 on the bridge) joins a veth end from each
of the other two (10.78.0.2, 10.78.0.3), so every machine reaches every other one, and
still nothing else.
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
TRIO_ADDRESSES = ("10.78.0.1", "10.78.0.2", "10.78.0.3")
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
    """The namespaces: ``names[i]`` holds ``addresses[i]``."""

    names: tuple[str, ...]
    interfaces: tuple[str, ...]
    """The interface of each namespace: its GLOO_SOCKET_IFNAME (the hostname of these test
    machines resolves to loopback, which gloo would otherwise advertise to the peers)."""
    addresses: tuple[str, ...] = ADDRESSES
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

    def kill_machine(self, machine: int) -> None:
        """SIGKILL every process of that namespace: the machine is lost."""
        for pid in self.pids(machine):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def kill_all(self) -> None:
        for machine in range(len(self.names)):
            self.kill_machine(machine)


def _create(names: tuple[str, str], veth: tuple[str, str]) -> None:
    for name in names:
        _ip("netns", "add", name)
    _ip("link", "add", veth[0], "netns", names[0], "type", "veth", "peer", "name", veth[1],
        "netns", names[1])
    for name, dev, address in zip(names, veth, ADDRESSES, strict=True):
        _ip("-n", name, "addr", "add", f"{address}/24", "dev", dev)
        _ip("-n", name, "link", "set", dev, "up")
        _ip("-n", name, "link", "set", "lo", "up")


def _create_trio(names: tuple[str, ...], interfaces: tuple[str, ...]) -> None:
    for name in names:
        _ip("netns", "add", name)
        _ip("-n", name, "link", "set", "lo", "up")
    hub, bridge = names[0], interfaces[0]
    _ip("-n", hub, "link", "add", bridge, "type", "bridge")
    _ip("-n", hub, "addr", "add", f"{TRIO_ADDRESSES[0]}/24", "dev", bridge)
    _ip("-n", hub, "link", "set", bridge, "up")
    for index in (1, 2):
        port = f"{bridge}p{index}"
        _ip("link", "add", interfaces[index], "netns", names[index], "type", "veth", "peer",
            "name", port, "netns", hub)
        _ip("-n", hub, "link", "set", port, "master", bridge)
        _ip("-n", hub, "link", "set", port, "up")
        _ip("-n", names[index], "addr", "add", f"{TRIO_ADDRESSES[index]}/24", "dev",
            interfaces[index])
        _ip("-n", names[index], "link", "set", interfaces[index], "up")


def _made(names: tuple[str, ...], create) -> None:
    """Run ``create``; skip (naming the reason) where namespaces cannot be made."""
    if not sys.platform.startswith("linux") or shutil.which("ip") is None:
        pytest.skip("multi-machine tests need Linux network namespaces and iproute2's `ip`")
    try:
        create()
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
        reason = getattr(exc, "stderr", "") or str(exc)
        for name in names:
            _ip("netns", "del", name, check=False)
        pytest.skip(f"cannot create network namespaces (needs root / CAP_SYS_ADMIN): "
                    f"{str(reason).strip()}")


def _torn_down(machines: Machines) -> Iterator[Machines]:
    try:
        yield machines
    finally:
        machines.kill_all()
        for name in machines.names:
            _ip("netns", "del", name, check=False)


@pytest.fixture(scope="session")
def _namespaces() -> Iterator[Machines]:
    tag = str(os.getpid())[-7:]
    names = (f"accel-mm-{tag}-0", f"accel-mm-{tag}-1")
    machines = Machines(names, (f"amm{tag}a", f"amm{tag}b"))
    _made(names, lambda: _create(names, machines.interfaces))
    yield from _torn_down(machines)


@pytest.fixture(scope="session")
def _trio_namespaces() -> Iterator[Machines]:
    tag = str(os.getpid())[-7:]
    names = tuple(f"accel-mm-{tag}-t{i}" for i in range(3))
    machines = Machines(names, (f"amt{tag}b", f"amt{tag}1", f"amt{tag}2"), TRIO_ADDRESSES)
    _made(names, lambda: _create_trio(names, machines.interfaces))
    yield from _torn_down(machines)


@pytest.fixture
def three_machines(_trio_namespaces: Machines) -> Iterator[Machines]:
    """Three namespaces on one bridge; whatever a test started there is killed afterwards."""
    try:
        yield _trio_namespaces
    finally:
        _trio_namespaces.kill_all()


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
