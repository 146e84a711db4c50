"""Run a :class:`~accel_launch.launch_plan.LaunchPlan` through torch's elastic agent.

The agent (``torch.distributed.launcher.api.elastic_launch``, what ``torchrun`` uses) starts
the workers, runs the rendezvous, watches them every ``monitor_interval`` seconds and, when
one fails, stops the others — so a rank blocked in a collective whose peer died never
leaves the launch hanging. A rank that blocks while alive fails nothing, so a multi-process
run also has :mod:`accel_launch.watchdog`, which ends a job whose ranks stop stepping. This
module adds the checks worth doing before anything starts (script exists, port free) and
turns a worker failure into one line and an exit code.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import shutil
import signal
import socket
import sys
import tempfile
from collections.abc import Mapping
from typing import Any

from accel_state import env
from accel_state.errors import ConfigurationError, LaunchError

from accel_launch import heartbeat
from accel_launch.heartbeat import lost_machines_note
from accel_launch.launch_plan import HostInfo, LaunchPlan, build_launch_plan, validate_launch_args
from accel_launch.lifeline import Lifeline
from accel_launch.machines import MachinesError, config_digest
from accel_launch.membership import agreeing_agent
from accel_launch.rendezvous import (
    JOB_KEY,
    register_backends,
    split_endpoint,
    wrapped_backend,
)
from accel_launch.watchdog import STALL_EXIT_CODE, Watchdog, quiet_torch_logs

__all__ = [
    "check_training_script",
    "describe_failures",
    "exit_code_of",
    "find_free_port",
    "is_port_in_use",
    "probe_host",
    "resolve_port",
    "run_launch",
    "run_plan",
]

_PROG = "accel launch"

ORPHAN_GRACE = 10.0
"""Seconds the orphan guard gives the workers of a launcher killed outright between its
SIGTERM and SIGKILL (a worker that handles SIGTERM may save a last checkpoint meanwhile)."""


def find_free_port() -> int:
    """A TCP port nothing listens on now, chosen by the OS (bind to port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])


def is_port_in_use(port: int, host: str = "") -> bool:
    """True when ``port`` cannot be bound on ``host`` (all interfaces by default)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # Like the TCPStore that will bind it: a port merely in TIME_WAIT is usable.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return True
    return False


def resolve_port(args: argparse.Namespace) -> int:
    """``--main_process_port`` (checked free on the rank-0 machine under the static
    rendezvous), or a free one picked."""
    if args.main_process_port is None:
        return find_free_port()
    port = int(args.main_process_port)
    # Only the static rendezvous makes machine 0 bind it. With c10d (also what restarts
    # switch to) whichever agent comes first hosts the store: when several "machines" share
    # this host, the port is legitimately bound already by the one that did.
    static = (getattr(args, "rdzv_backend", None) or "static") == "static" and not getattr(
        args, "max_restarts", 0)
    if args.machine_rank == 0 and static and is_port_in_use(port):
        raise ConfigurationError(
            f"--main_process_port {port} is already in use on this machine: stop the process "
            "holding it, pass another port, or leave the flag out to pick a free one.")
    return port


def check_training_script(args: argparse.Namespace) -> None:
    """The script (or, with --no_python, the program) must exist before workers start."""
    script = args.training_script
    if args.module:
        return  # resolved by the workers' `python -m`, against their own sys.path
    if args.no_python:
        if os.path.exists(script) or shutil.which(script):
            return
        raise ConfigurationError(
            f"program {script!r} not found (--no_python): give a path or a command on PATH.")
    if not os.path.isfile(script):
        raise ConfigurationError(
            f"training script {script!r} not found (from {os.getcwd()}): check the path, "
            "or pass -m/--module to run a module.")


def probe_host(args: argparse.Namespace) -> HostInfo:
    """Facts the plan needs; CUDA is only counted (not initialised) when it matters."""
    cuda = 0
    if not args.cpu:
        import torch

        cuda = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if hasattr(os, "sched_getaffinity"):
        cores = len(os.sched_getaffinity(0))
    else:
        cores = os.cpu_count() or 1
    return HostInfo(
        cpu_count=max(1, cores),
        cuda_device_count=cuda,
        omp_num_threads_set=env.OMP_NUM_THREADS.is_set(),
        shutdown_timeout_set=env.ELASTIC_SHUTDOWN_TIMEOUT.is_set(),
        python=sys.executable,
        stall_timeout=env.STALL_TIMEOUT.get(),
    )


def exit_code_of(worker_exitcode: int) -> int:
    """A worker's code as ours: itself, 128+N for signal N, 1 when it says nothing useful."""
    if worker_exitcode > 0:
        return min(worker_exitcode, 255)
    if worker_exitcode < 0:
        return 128 + min(-worker_exitcode, 127)
    return 1


def _describe_one(rank: int, failure: Any) -> str:
    code = failure.exitcode
    if code < 0:
        try:
            how = f"was killed by signal {signal.Signals(-code).name}"
        except ValueError:
            how = f"was killed by signal {-code}"
    else:
        how = f"exited with code {code}"
    return f"rank {rank} (local rank {failure.local_rank}, pid {failure.pid}) {how}"


def describe_failures(failures: Mapping[int, Any], root: int) -> str:
    """One line naming every failed rank, the first failure first."""
    order = [root, *sorted(r for r in failures if r != root)]
    parts = "; ".join(_describe_one(r, failures[r]) for r in order)
    return (f"{parts}. The other workers were stopped; the failed rank's traceback, if any, "
            "is in the output above.")


#: LaunchConfig fields newer than the oldest torch we support (shutdown_timeout: not in 2.11):
#: left out on an older torch, which then keeps its own default.
_NEWER_FIELDS = frozenset({"shutdown_timeout"})


def supported_config(config: Mapping[str, Any], launch_config: Any) -> dict[str, Any]:
    """``config`` without the newer fields this torch's ``LaunchConfig`` does not have."""
    known = {f.name for f in dataclasses.fields(launch_config)}
    return {k: v for k, v in config.items() if k in known or k not in _NEWER_FIELDS}


def _launch_config(plan: LaunchPlan) -> Any:
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, Std
    from torch.distributed.launcher.api import LaunchConfig

    logs = DefaultLogsSpecs(log_dir=plan.log_dir, tee=Std.from_str(plan.tee))
    config = dict(plan.config)
    wrapped = wrapped_backend(config["rdzv_backend"])
    if int(config["max_nodes"]) > 1 and wrapped != config["rdzv_backend"]:
        register_backends()  # the machines meet before torch's rendezvous (rendezvous.py)
        config["rdzv_backend"] = wrapped
        config["rdzv_configs"] = {**config["rdzv_configs"], JOB_KEY: json.dumps(plan.job)}
        if wrapped == "accel-c10d" and not config.get("local_addr"):
            from accel_launch.netcheck import address_to_advertise

            # c10d publishes machine 0's hostname to the others: not where it is loopback
            address = address_to_advertise(split_endpoint(config["rdzv_endpoint"])[0])
            if address:
                config["local_addr"] = address
    return LaunchConfig(logs_specs=logs, **supported_config(config, LaunchConfig))


def run_plan(plan: LaunchPlan, *, quiet: bool = False, debug: bool = False) -> int:
    """Start the workers of ``plan``, wait for them, and return the launch's exit code."""
    from torch.distributed import DistError
    from torch.distributed.elastic.multiprocessing.api import SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.elastic.rendezvous import RendezvousError
    from torch.distributed.launcher.api import elastic_launch

    if quiet:
        quiet_torch_logs()
    config = _launch_config(plan)
    folder = tempfile.mkdtemp(prefix="accel-watchdog-") if plan.watch else None
    dog = _watchdog(plan, folder)
    extra = {env.WATCHDOG_DIR.name: folder} if folder else {}
    try:
        with Lifeline(ORPHAN_GRACE) as lifeline, agreeing_agent(), \
                env.patch_environment(**plan.env, **extra, **lifeline.env), dog:
            elastic_launch(config, plan.entrypoint)(*plan.args)
    except ChildFailedError as exc:
        root, failure = exc.get_first_failure()
        note = dog.failure_note(root) if isinstance(dog, Watchdog) else None
        text = f"{describe_failures(exc.failures, root)}{' ' + note if note else ''}"
        print(f"{_PROG}: error: {_after_lost(text)}", file=sys.stderr)
        return exit_code_of(failure.exitcode)
    except SignalException as exc:
        if isinstance(dog, Watchdog) and dog.summary is not None:
            text = dog.summary if dog.lost else _after_lost(dog.summary)
            print(f"{_PROG}: error: {text}", file=sys.stderr)
            return STALL_EXIT_CODE
        print(f"{_PROG}: stopped by signal {exc.sigval.name}; the workers were stopped.",
              file=sys.stderr)
        return 128 + int(exc.sigval)
    except MachinesError as exc:
        print(f"{_PROG}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # SIGINT before the workers started (torch's handler not set)
        print(f"{_PROG}: stopped by signal SIGINT before the workers started.", file=sys.stderr)
        return 128 + int(signal.SIGINT)
    except (RendezvousError, DistError) as exc:
        if debug:
            raise
        endpoint = plan.config["rdzv_endpoint"]
        detail = (str(exc).strip().splitlines() or ["no detail"])[0].rstrip(".")
        raise LaunchError(
            f"the rendezvous at {endpoint} failed ({type(exc).__name__}: {detail}); check "
            "--main_process_ip/--main_process_port and that every machine can reach it."
        ) from exc
    finally:
        beat = heartbeat.active()
        if beat is not None:
            beat.stop()
        if folder:
            shutil.rmtree(folder, ignore_errors=True)
    return 0


def _after_lost(text: str) -> str:
    """``text``, after the name of the machine that was lost when there is one."""
    lost = lost_machines_note()
    return f"{lost} {text[:1].upper()}{text[1:]}" if lost else text


def _watchdog(plan: LaunchPlan, folder: str | None) -> Any:
    """The hang watchdog of a multi-process plan; a no-op context for one process."""
    if folder is None:
        return contextlib.nullcontext()
    return Watchdog(folder, plan.stall_timeout, expected=int(plan.config["nproc_per_node"]),
                    machines=int(plan.config["max_nodes"]),
                    startup_timeout=plan.startup_timeout,
                    lost_machines=heartbeat.silent_machines)


def _with_network_notes(args: argparse.Namespace, plan: LaunchPlan) -> LaunchPlan:
    """``plan`` with a warning when this machine's hostname resolves to loopback in a
    multi-machine launch (accel_launch.netcheck)."""
    host = args.main_process_ip
    if getattr(args, "rdzv_endpoint", None):
        host = split_endpoint(args.rdzv_endpoint)[0]
    if args.num_machines < 2 or not host:
        return plan
    from accel_launch.netcheck import loopback_hostname_warning

    note = loopback_hostname_warning(host, os.environ)
    return dataclasses.replace(plan, warnings=(*plan.warnings, note)) if note else plan


def run_launch(args: argparse.Namespace) -> int:
    """`accel launch`: resolve and check first (no process started on bad input), then run."""
    from accel_launch.resolve import resolve_launch_args

    resolved = resolve_launch_args(args)
    validate_launch_args(args)
    digest = config_digest(resolved.config.raw if resolved.config else None)
    if args.dry_run:
        from accel_launch.dry_run import format_dry_run

        port = args.main_process_port if args.main_process_port is not None else 0
        plan = build_launch_plan(args, probe_host(args), port, resolved.sources,
                                 config_digest=digest)
        sys.stdout.write(format_dry_run(resolved, _with_network_notes(args, plan)))
        return 0
    check_training_script(args)
    port = resolve_port(args)
    plan = build_launch_plan(args, probe_host(args), port, resolved.sources,
                             config_digest=digest)
    plan = _with_network_notes(args, plan)
    if not args.quiet:
        for note in (*resolved.notes, *plan.warnings):
            print(f"{_PROG}: warning: {note}", file=sys.stderr)
        nproc = plan.config["nproc_per_node"]
        where = "CPU" if args.cpu else "default device"
        source = f", {resolved.config.label}" if resolved.config else ""
        print(f"{_PROG}: starting {nproc} process(es) on this machine ({where}{source}), "
              f"rendezvous at {plan.config['rdzv_endpoint']}", file=sys.stderr)
    return run_plan(plan, quiet=args.quiet, debug=args.debug)
