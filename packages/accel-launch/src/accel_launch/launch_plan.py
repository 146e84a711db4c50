"""Turn `accel launch` flags into what torch's elastic agent needs — as pure functions.

:func:`validate_launch_args` rejects bad flag combinations, :func:`build_launch_plan` maps
the flags plus a few facts about the machine (:class:`HostInfo`) to a :class:`LaunchPlan`:
the ``LaunchConfig`` keyword arguments, the worker command line and the environment
variables the workers get. Nothing here touches the network, the process table or
``os.environ``, so every rule is unit-testable; :mod:`accel_launch.elastic` does the I/O.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from accel_state import env
from accel_state.errors import ConfigurationError

from accel_launch.membership import check_machine_range, machine_range
from accel_launch.watchdog import (
    DEFAULT_STALL_TIMEOUT,
    DEFAULT_STARTUP_TIMEOUT,
    parse_stall_timeout,
)

__all__ = [
    "DEFAULT_RDZV_TIMEOUT",
    "DEFAULT_SHUTDOWN_TIMEOUT",
    "HostInfo",
    "LaunchPlan",
    "build_launch_plan",
    "local_process_count",
    "parse_rdzv_conf",
    "stall_timeout_of",
    "startup_timeout_of",
    "total_process_count",
    "validate_launch_args",
]

DEFAULT_SHUTDOWN_TIMEOUT = 30
DEFAULT_RDZV_TIMEOUT = 300.0
"""Seconds the machines have to join (--rdzv_timeout): minutes, not torch's 10 to 30."""
UNREACHABLE_LIMIT = 45.0
"""Seconds a machine keeps trying an address that does not answer at all (no route, time
out) before it names it, so that with the launcher's start it is named within a minute;
one that refuses (machine 0 not started yet) is retried for the whole --rdzv_timeout."""
"""Seconds between the stop signal and SIGKILL when the launcher is interrupted (Ctrl-C,
SIGTERM): long enough for workers to write a last checkpoint on preemption
(``Accelerator.save_state_if_preempted``); workers that do not catch SIGTERM exit at once."""

_TEE_RE = re.compile(r"^[0-3]$|^[0-9]+:[0-3](,[0-9]+:[0-3])*$")


@dataclass(frozen=True)
class HostInfo:
    """Facts about the launching machine the plan depends on (probed by the caller)."""

    cpu_count: int
    """Cores this process may run on."""
    cuda_device_count: int = 0
    """Visible CUDA devices (0 on a CPU-only machine)."""
    omp_num_threads_set: bool = False
    """Whether ``OMP_NUM_THREADS`` is already set in the launcher's environment."""
    shutdown_timeout_set: bool = False
    """Whether ``TORCH_ELASTIC_SHUTDOWN_TIMEOUT`` is set (then torch reads it itself)."""
    python: str = sys.executable
    """Interpreter the workers run under."""
    stall_timeout: str | None = None
    """``$ACCEL_STALL_TIMEOUT`` as set in the launcher's environment (None: unset)."""


@dataclass(frozen=True)
class LaunchPlan:
    """Everything needed to start the workers, decided before anything is started."""

    config: Mapping[str, Any]
    """Keyword arguments of ``torch.distributed.launcher.api.LaunchConfig`` (no logs_specs)."""
    entrypoint: str
    """Program the elastic agent runs for every worker (the Python interpreter or the script)."""
    args: tuple[str, ...]
    """Arguments after ``entrypoint``: ``-u script.py --user args``."""
    env: Mapping[str, str]
    """Variables added to the launcher's environment, which every worker inherits."""
    log_dir: str | None = None
    """``--log_dir`` for torch's DefaultLogsSpecs (None: a temporary directory)."""
    tee: str = "0"
    """``--tee`` for torch's DefaultLogsSpecs (0 none, 1 stdout, 2 stderr, 3 both)."""
    warnings: tuple[str, ...] = field(default=())
    """Things worth telling the user that are not errors."""
    watch: bool = False
    """Run the hang watchdog's beacons (more than one process in the job)."""
    stall_timeout: float | None = None
    """Seconds without a step before the watchdog ends the job (None: it only watches)."""
    startup_timeout: float | None = None
    """Seconds from the launch to the first step before the watchdog ends the job."""
    job: Mapping[str, Any] = field(default_factory=dict)
    """What the machines of a multi-machine launch compare before starting
    (:mod:`accel_launch.machines`): ``shape``, ``machine_rank``, ``timeout``,
    ``unreachable_limit``."""

    @property
    def command(self) -> list[str]:
        """The worker command line, as a shell would see it."""
        return [self.entrypoint, *self.args]


def _flag_error(flag: str, value: object, fix: str) -> ConfigurationError:
    return ConfigurationError(f"{flag} {value!r} is invalid: {fix}")


def parse_rdzv_conf(text: str) -> dict[str, str]:
    """``"key1=v1,key2=v2"`` -> dict; a malformed pair is an error naming it."""
    config: dict[str, str] = {}
    for pair in (p.strip() for p in text.split(",")):
        if not pair:
            continue
        key, sep, value = pair.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise _flag_error("--rdzv_conf", text, f"the pair {pair!r} must be key=value "
                              "(e.g. timeout=60,read_timeout=30).")
        config[key.strip()] = value.strip()
    return config


def validate_launch_args(args: argparse.Namespace, *, check_plugin_flags: bool = True) -> None:
    """Reject impossible flag values and combinations (resolves ``args`` first if needed;
    ``check_plugin_flags``: see :func:`accel_launch.resolve.resolve_launch_args`)."""
    from accel_launch.resolve import resolve_launch_args

    resolve_launch_args(args, check_plugin_flags=check_plugin_flags)
    if args.num_processes is not None and args.num_processes < 1:
        raise _flag_error("--num_processes", args.num_processes,
                          "use a positive number of processes, e.g. --num_processes 2.")
    if args.num_machines < 1:
        raise _flag_error("--num_machines", args.num_machines, "use 1 or more machines.")
    if not 0 <= args.machine_rank < args.num_machines:
        raise _flag_error("--machine_rank", args.machine_rank,
                          f"it must be between 0 and --num_machines - 1 = {args.num_machines - 1}.")
    endpoint = getattr(args, "rdzv_endpoint", None)
    if endpoint is not None:
        _check_endpoint(endpoint)
    if args.num_machines > 1 and not args.main_process_ip and not endpoint:
        raise ConfigurationError(
            f"--num_machines {args.num_machines} needs --main_process_ip: pass the address of "
            "the machine with --machine_rank 0 on every machine.")
    if args.num_machines > 1 and args.main_process_port is None and not endpoint:
        raise ConfigurationError(
            f"--num_machines {args.num_machines} needs --main_process_port: pick one free port "
            "and pass the same value on every machine.")
    if args.main_process_port is not None and not 1 <= args.main_process_port <= 65535:
        raise _flag_error("--main_process_port", args.main_process_port,
                          "use a port between 1 and 65535, or leave it out to pick a free one.")
    if args.num_processes is not None and args.num_processes % args.num_machines:
        raise _flag_error("--num_processes", args.num_processes,
                          f"it counts the processes of all machines and must be a multiple of "
                          f"--num_machines {args.num_machines}.")
    check_machine_range(args)
    if args.num_cpu_threads_per_process is not None and args.num_cpu_threads_per_process < 1:
        raise _flag_error("--num_cpu_threads_per_process", args.num_cpu_threads_per_process,
                          "use 1 or more threads, or leave it out for cores / processes.")
    if args.module and args.no_python:
        raise ConfigurationError("--module and --no_python cannot be combined: --module runs "
                                 "`python -m <module>`, --no_python runs the program directly.")
    if args.max_restarts < 0:
        raise _flag_error("--max_restarts", args.max_restarts, "use 0 or more restarts.")
    if args.monitor_interval <= 0:
        raise _flag_error("--monitor_interval", args.monitor_interval,
                          "use a positive number of seconds, e.g. 0.1.")
    if not _TEE_RE.match(args.tee):
        raise _flag_error("-t/--tee", args.tee,
                          "use 0 (none), 1 (stdout), 2 (stderr), 3 (both) or a per-rank map "
                          "like 0:3,1:1.")
    parse_rdzv_conf(args.rdzv_conf)
    rdzv_timeout = getattr(args, "rdzv_timeout", DEFAULT_RDZV_TIMEOUT)
    if rdzv_timeout is None or not rdzv_timeout > 0:
        raise _flag_error("--rdzv_timeout", rdzv_timeout,
                          "use a positive number of seconds, e.g. --rdzv_timeout 300.")
    if getattr(args, "stall_timeout", None) is not None:
        parse_stall_timeout(args.stall_timeout)
    startup_timeout_of(args)


def _check_endpoint(endpoint: str) -> None:
    host, sep, port = endpoint.rpartition(":")
    if not sep or not host.strip("[]") or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise _flag_error("--rdzv_endpoint", endpoint,
                          "give HOST:PORT with a port between 1 and 65535, e.g. 10.0.0.5:29400.")


def stall_timeout_of(args: argparse.Namespace, host: HostInfo) -> float | None:
    """``--stall_timeout``, else ``$ACCEL_STALL_TIMEOUT``, else the default (None: off)."""
    if getattr(args, "stall_timeout", None) is not None:
        return parse_stall_timeout(args.stall_timeout)
    if host.stall_timeout is not None and host.stall_timeout.strip():
        return parse_stall_timeout(host.stall_timeout, env.STALL_TIMEOUT.name)
    return DEFAULT_STALL_TIMEOUT


def startup_timeout_of(args: argparse.Namespace) -> float | None:
    """``--startup_timeout`` (or the config file's), else the default (None: off)."""
    if getattr(args, "startup_timeout", None) is not None:
        return parse_stall_timeout(args.startup_timeout, "--startup_timeout")
    return DEFAULT_STARTUP_TIMEOUT


def total_process_count(args: argparse.Namespace, host: HostInfo) -> int:
    """``--num_processes`` (all machines), or one per CUDA device (else one) per machine."""
    if args.num_processes is not None:
        return int(args.num_processes)
    per_machine = 1 if args.cpu else max(1, host.cuda_device_count)
    return per_machine * args.num_machines


def local_process_count(args: argparse.Namespace, host: HostInfo) -> int:
    """Processes started on this machine."""
    return total_process_count(args, host) // args.num_machines


def _worker_env(args: argparse.Namespace, host: HostInfo, nproc: int,
                sources: Mapping[str, str]) -> dict[str, str]:
    """The environment contract `accel launch` sets for its workers (accel_state.env)."""
    from accel_launch.worker_env import plugin_env

    out: dict[str, str] = {}
    env.LAUNCHED.set(1, env=out)
    out.update(plugin_env(args, sources))
    if args.num_cpu_threads_per_process is not None:
        env.OMP_NUM_THREADS.set(args.num_cpu_threads_per_process, env=out)
    elif not host.omp_num_threads_set:
        env.OMP_NUM_THREADS.set(max(1, host.cpu_count // nproc), env=out)
    if args.max_restarts:
        # With the rendezvous store shared, restarted gloo workers read the previous
        # attempt's addresses and fail to connect; own stores per attempt fix that.
        env.DISABLE_SHARE_RDZV_TCP_STORE.set(1, env=out)
    return out


def _endpoint(host: str, port: int) -> str:
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"{host}:{port}"


def _worker_command(args: argparse.Namespace, host: HostInfo) -> tuple[str, tuple[str, ...]]:
    script_args = tuple(args.training_script_args)
    if args.no_python:
        return args.training_script, script_args
    head = ("-u", "-m", args.training_script) if args.module else ("-u", args.training_script)
    return host.python, (*head, *script_args)


def _plan_warnings(args: argparse.Namespace, host: HostInfo, nproc: int) -> tuple[str, ...]:
    notes = []
    if args.multi_gpu and not args.cpu and host.cuda_device_count == 0:
        notes.append("--multi_gpu was given but no CUDA device is visible: the workers will run "
                     "on the CPU; pass --cpu to say so and silence this warning.")
    if not args.cpu and 0 < host.cuda_device_count < nproc:
        notes.append(f"{nproc} processes per machine but only {host.cuda_device_count} CUDA "
                     "device(s): several processes will share a device.")
    return tuple(notes)


def _strategy_name(args: argparse.Namespace) -> str:
    if getattr(args, "strategy", None):
        return str(args.strategy)
    for dest, name in (("use_deepspeed", "deepspeed"), ("use_fsdp", "fsdp"),
                       ("use_parallelism_config", "parallelism_config")):
        if getattr(args, dest, False):
            return name
    return "default"


def _job(args: argparse.Namespace, nproc: int, rdzv_timeout: float,
         config_digest: str) -> dict[str, Any]:
    from accel_launch.machines import job_shape

    shape = job_shape(num_machines=machine_range(args), per_machine=nproc,
                      mixed_precision=args.mixed_precision, strategy=_strategy_name(args),
                      config=config_digest)
    return {"shape": shape, "machine_rank": args.machine_rank, "timeout": rdzv_timeout,
            "unreachable_limit": min(UNREACHABLE_LIMIT, rdzv_timeout)}


def build_launch_plan(args: argparse.Namespace, host: HostInfo, port: int,
                      sources: Mapping[str, str] | None = None, *,
                      config_digest: str = "none") -> LaunchPlan:
    """Map flags, machine facts and the rendezvous ``port`` to a :class:`LaunchPlan`.

    ``sources`` comes from :func:`accel_launch.resolve.resolve_launch_args`; without it the
    flags are resolved here (config file, cluster, defaults). ``config_digest``: the config
    file's, which the machines compare (:func:`accel_launch.machines.config_digest`).
    """
    if sources is None:
        from accel_launch.resolve import resolve_launch_args

        sources = resolve_launch_args(args).sources
    validate_launch_args(args)
    nproc = local_process_count(args, host)
    ip = args.main_process_ip or "127.0.0.1"
    rdzv_configs: dict[str, Any] = parse_rdzv_conf(args.rdzv_conf)
    rdzv_timeout = float(getattr(args, "rdzv_timeout", DEFAULT_RDZV_TIMEOUT))
    if args.rdzv_backend == "static":
        rdzv_configs["rank"] = args.machine_rank
    if args.num_machines > 1:  # torch's own waits end with ours (one machine waits for none)
        key = {"static": "timeout", "c10d": "join_timeout"}.get(args.rdzv_backend)
        if key:
            rdzv_configs.setdefault(key, int(rdzv_timeout))
    low, high = machine_range(args)
    endpoint = getattr(args, "rdzv_endpoint", None) or _endpoint(ip, port)
    where = endpoint.rpartition(":")  # the same on every machine, unlike a port picked here
    config = {
        "min_nodes": low,
        "max_nodes": high,
        "nproc_per_node": nproc,
        "run_id": getattr(args, "rdzv_id", None) or env.SLURM_JOB_ID.get()
        or f"accel-{where[0].strip('[]')}-{where[2]}",
        "role": args.role,
        "rdzv_endpoint": endpoint,
        "rdzv_backend": args.rdzv_backend,
        "rdzv_configs": rdzv_configs,
        "max_restarts": args.max_restarts,
        "monitor_interval": float(args.monitor_interval),
        "start_method": "spawn",
        "shutdown_timeout": None if host.shutdown_timeout_set else DEFAULT_SHUTDOWN_TIMEOUT,
    }
    if getattr(args, "local_addr", None):
        config["local_addr"] = args.local_addr
    entrypoint, worker_args = _worker_command(args, host)
    stall_timeout = stall_timeout_of(args, host)  # checked even where it is not used
    watch = total_process_count(args, host) > 1  # one process has no peer to wait for
    return LaunchPlan(
        config=config,
        entrypoint=entrypoint,
        args=worker_args,
        env=_worker_env(args, host, nproc, sources),
        log_dir=args.log_dir,
        tee=args.tee,
        warnings=_plan_warnings(args, host, nproc),
        watch=watch,
        stall_timeout=stall_timeout if watch else None,
        startup_timeout=startup_timeout_of(args) if watch else None,
        job=_job(args, nproc, rdzv_timeout, config_digest),
    )

