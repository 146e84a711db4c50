"""torch's static and c10d rendezvous, with the machines meeting first (accel_launch.machines).

Registered in torch's rendezvous handler registry as ``accel-static`` and ``accel-c10d``
(its documented extension point): each wraps torch's own handler, which still does the
rendezvous the agent and the workers use. What the wrapper adds before it:

- static: a machine other than 0 first checks that machine 0 answers, one line per
  interval rather than torch's retry warnings per attempt, and names an address it cannot
  reach within ``unreachable_limit`` seconds; machine 0 opens the store server that torch's
  handler then shares (``multi_tenant``). Then the machines meet (claims, shapes, verdict)
  and only then does torch's handler run, at once. Each launcher then beats a counter in
  that store (:mod:`accel_launch.heartbeat`), so a failure can name a machine that was lost.
- c10d: machine 0 hosts the store when the endpoint is one of its addresses (torch only
  compares it with the hostname's); the same reachability check where the endpoint is
  another machine's, progress
  lines while torch's handler waits for the machines, then the meeting over the store of
  the round (group ranks, not --machine_rank, index the machines there).

The launch settings travel in the rendezvous configuration (``rdzv_configs``) under the
key ``accel_job`` (JSON), so no state is kept between launches.
"""

from __future__ import annotations

import datetime
import errno
import ipaddress
import json
import os
import socket
import sys
import threading
import time
from typing import Any

from accel_launch.heartbeat import Heartbeat
from accel_launch.machines import MachinesError, Progress, meet, progress_interval
from accel_launch.membership import (
    membership_note,
    new_agreement,
    store_lost_note,
    too_few_note,
)

__all__ = ["JOB_KEY", "register_backends", "wrapped_backend"]

JOB_KEY = "accel_job"
_WRAPS = {"accel-static": "static", "accel-c10d": "c10d"}
_UNREACHABLE = (errno.EHOSTUNREACH, errno.ENETUNREACH, errno.ETIMEDOUT, errno.EADDRNOTAVAIL)


def wrapped_backend(backend: str) -> str:
    """The registered name that wraps ``backend`` (itself when not wrapped)."""
    return next((name for name, inner in _WRAPS.items() if inner == backend), backend)


def register_backends() -> None:
    """Add the wrappers to torch's registry (again is a no-op)."""
    from torch.distributed.elastic.rendezvous import rendezvous_handler_registry

    for name in _WRAPS:
        rendezvous_handler_registry.register(name, _create)


def _create(params: Any) -> Any:
    from torch.distributed.elastic.rendezvous import (
        RendezvousParameters,
        rendezvous_handler_registry,
    )

    config = dict(params.config)
    job = json.loads(config.pop(JOB_KEY))
    host = split_endpoint(params.endpoint)[0]
    if (params.backend == "accel-c10d" and "is_host" not in config
            and int(job["machine_rank"]) == 0 and not _is_loopback(host)
            and is_local_address(host)):
        # torch finds the store's host by the hostname's addresses: where the hostname
        # resolves to loopback (or the address is a second NIC's) no machine would host it.
        # (On loopback every "machine" is this one: torch's first-come rule stays.)
        config["is_host"] = "1"
    inner = rendezvous_handler_registry.create_handler(RendezvousParameters(
        backend=_WRAPS[params.backend], endpoint=params.endpoint, run_id=params.run_id,
        min_nodes=params.min_nodes, max_nodes=params.max_nodes,
        local_addr=getattr(params, "local_addr", None), **config))
    return _MeetingRendezvous(params.backend, inner, job, params)


def split_endpoint(endpoint: str) -> tuple[str, int]:
    host, _, port = endpoint.rpartition(":")
    return host.strip("[]"), int(port)


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def is_local_address(host: str) -> bool:
    """Whether ``host`` is an address of this machine (it can be bound here)."""
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError:
        return False
    for family, _, _, _, address in infos:
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((address[0], 0))
            except OSError:
                continue
            return True
    return False


def wait_until_reachable(host: str, port: int, progress: Progress, world: int,
                         unreachable_limit: float) -> socket.socket:
    """A connection to ``host:port`` once something listens there (left open: its end is
    how :mod:`accel_launch.heartbeat` sees machine 0 go); raise :class:`MachinesError`
    naming the address when it stays unreachable for ``unreachable_limit`` s, or refuses
    connections for the whole rendezvous timeout."""
    unreachable_since: float | None = None
    while True:
        try:
            return socket.create_connection((host, port), timeout=2.0)
        except socket.gaierror as exc:
            raise MachinesError(
                f"cannot resolve --main_process_ip {host!r} ({exc.strerror}): give machine "
                "0's IP address, or a name every machine resolves.") from None
        except ConnectionRefusedError:
            reason, unreachable_since = "nothing listens there yet (connection refused)", None
        except OSError as exc:
            timed_out = isinstance(exc, TimeoutError) or exc.errno in _UNREACHABLE
            reason = "timed out" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc))
            if not timed_out:
                unreachable_since = None
            elif unreachable_since is None:
                unreachable_since = time.monotonic()
        now = time.monotonic()
        # unreachable for the limit, or until the rendezvous time ran out (the first attempt
        # of a loaded machine may start late): either way the address is what to name
        if unreachable_since is not None and (now - unreachable_since >= unreachable_limit
                                              or progress.left() <= 0):
            raise MachinesError(
                f"cannot reach machine 0 at {host}:{port} (--main_process_ip / "
                f"--main_process_port) within {unreachable_limit:.0f} s: {reason}. Give machine "
                "0's address on a network this machine shares with it, and check routes and "
                "firewalls between the machines.")
        if progress.left() <= 0:
            raise MachinesError(
                f"machine 0 at {host}:{port} did not answer within {progress.limit:.0f} s "
                f"(--rdzv_timeout): {reason}. Start machine 0 (--machine_rank 0) with the same "
                "--main_process_port, or check the address and port.")
        progress.tick(0, world, f"machine 0 does not answer: {reason}")
        time.sleep(1.0)


class _Ticker:
    """Progress lines from a thread while torch's handler blocks (c10d)."""

    def __init__(self, progress: Progress, world: int) -> None:
        self.progress, self.world = progress, world
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="accel-rdzv-progress",
                                        daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            self.progress.tick(None, self.world, "torch's c10d rendezvous is assembling them")

    def __enter__(self) -> _Ticker:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


class _MeetingRendezvous:
    """A torch ``RendezvousHandler`` that delegates to ``inner`` after the meeting."""

    def __init__(self, name: str, inner: Any, job: dict[str, Any], params: Any) -> None:
        self._name, self._inner, self._job, self._params = name, inner, job, params
        self._store: Any = None  # machine 0's server under the static rendezvous: kept open
        self._beat: Heartbeat | None = None
        self._line: socket.socket | None = None  # machine 1+: idle connection to machine 0
        self.restart_agreement = new_agreement()  # filled by membership.agreeing_agent
        self._rounds = 0  # rendezvous this launcher has been part of
        self.endpoint = params.endpoint
        self.timeout = float(job["timeout"])

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def get_backend(self) -> str:
        return self._name

    @property
    def use_agent_store(self) -> bool:
        return bool(self._inner.use_agent_store)

    def _me(self, address: str, rank: int) -> dict[str, Any]:
        return {"rank": rank, "host": socket.gethostname(), "address": address,
                "pid": os.getpid(), "shape": self._job["shape"],
                "restarts": self.restart_agreement.mine}

    def _lost(self, exc: Exception) -> MachinesError:
        return MachinesError(
            f"lost the connection to machine 0 at {self.endpoint} while the machines were "
            f"meeting ({type(exc).__name__}): its launcher has stopped; see its output.")

    def _progress(self, limit: float) -> Progress:
        return Progress(self.endpoint, limit, progress_interval(self.timeout))

    def num_nodes_waiting(self) -> int:
        """torch's answer (asked by the agent while the workers run); the rendezvous store
        gone once the machines had met is named as a lost host, not a bad address."""
        from torch.distributed.elastic.rendezvous import RendezvousConnectionError

        try:
            return int(self._inner.num_nodes_waiting())
        except RendezvousConnectionError:
            if not self._rounds:
                raise
            raise MachinesError(store_lost_note(self.endpoint)) from None

    def next_rendezvous(self) -> Any:
        if self._name == "accel-static":
            return self._static()
        return self._c10d()

    def _static(self) -> Any:
        from torch.distributed import TCPStore

        host, port = split_endpoint(self.endpoint)
        rank, world = int(self._job["machine_rank"]), int(self._params.max_nodes)
        progress = self._progress(self.timeout)
        if rank == 0:
            address = host
            if self._store is None:
                self._store = TCPStore(host, port, None, True,
                                       datetime.timedelta(seconds=self.timeout),
                                       wait_for_workers=False, multi_tenant=True)
        else:
            line = wait_until_reachable(host, port, progress, world,
                                        float(self._job["unreachable_limit"]))
            address = str(line.getsockname()[0])
            if self._line is None:
                self._line = line
            else:
                line.close()
            if self._store is None:
                self._store = TCPStore(host, port, None, False, datetime.timedelta(seconds=30),
                                       wait_for_workers=False)
        prefix = f"accel/{self._params.run_id}"
        meet(self._store, prefix=prefix, index=rank, world=world, me=self._me(address, rank),
             progress=progress, claim=True, lost=self._lost)
        if self._beat is None:
            self._beat = Heartbeat(self._store, prefix, rank, world, line=self._line,
                                   every=progress_interval(self.timeout)).start()
        return self._inner.next_rendezvous()

    def _c10d(self) -> Any:
        host, port = split_endpoint(self.endpoint)
        world = int(self._params.max_nodes)
        progress = self._progress(self.timeout)
        address = host
        if not is_local_address(host):
            with wait_until_reachable(host, port, progress, world,
                                      float(self._job["unreachable_limit"])) as line:
                address = str(line.getsockname()[0])
        from torch.distributed.elastic.rendezvous import (
            RendezvousConnectionError,
            RendezvousTimeoutError,
        )

        with _Ticker(progress, world):
            try:
                info = self._inner.next_rendezvous()
            except RendezvousTimeoutError:
                if not self._rounds:
                    raise
                raise MachinesError(too_few_note(int(self._params.min_nodes),
                                                 self.timeout)) from None
            except RendezvousConnectionError:
                if not self._rounds:
                    raise
                raise MachinesError(store_lost_note(self.endpoint)) from None
        met = meet(info.store, prefix="accel", index=info.rank, world=info.world_size,
                   me=self._me(address, info.rank), progress=self._progress(60.0),
                   claim=False, lost=self._lost)
        # every machine of this round starts its workers with the same restart count
        agreed = max(int(e.get("restarts", 0)) for e in met.values())
        self.restart_agreement.agreed = agreed
        note = membership_note(self._rounds, agreed, info.world_size, self._params.min_nodes,
                               self._params.max_nodes,
                               int(self._job["shape"]["processes_per_machine"]))
        self._rounds += 1
        if note:
            print(f"accel launch: {note}", file=sys.stderr, flush=True)
        return info
