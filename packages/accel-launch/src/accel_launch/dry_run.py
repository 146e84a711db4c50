"""`accel launch --dry_run`: the resolved configuration, where each value came from, the
worker command and environment, and the equivalent `torchrun` command of every machine —
printed, nothing started."""

from __future__ import annotations

import shlex
from typing import Any

from accel_launch.flags import GROUPS
from accel_launch.launch_plan import LaunchPlan
from accel_launch.resolve import DEFAULT, Resolved

__all__ = ["format_dry_run", "torchrun_command"]

_SHOWN_MACHINES = 8


def _script_part(plan: LaunchPlan) -> list[str]:
    """The worker command as torchrun takes it (it adds ``python -u`` itself)."""
    args = list(plan.args)
    if args[:1] == ["-u"]:
        rest = args[1:]
        return ["-m", *rest[1:]] if rest[:1] == ["-m"] else rest
    return ["--no-python", plan.entrypoint, *args]


def _nodes(cfg: Any) -> str:
    """``N``, or ``MIN:MAX`` for an elastic job (torchrun's --nnodes)."""
    low, high = cfg["min_nodes"], cfg["max_nodes"]
    return str(high) if low == high else f"{low}:{high}"


def torchrun_command(plan: LaunchPlan, machine_rank: int) -> list[str]:
    """The ``torchrun`` command line that starts machine ``machine_rank``'s part of
    ``plan`` the same way (its environment: ``plan.env``)."""
    cfg = plan.config
    cmd = ["torchrun", "--nnodes", _nodes(cfg), "--nproc-per-node", str(cfg["nproc_per_node"]),
           "--node-rank", str(machine_rank), "--rdzv-backend", str(cfg["rdzv_backend"]),
           "--rdzv-endpoint", str(cfg["rdzv_endpoint"]), "--rdzv-id", str(cfg["run_id"])]
    if cfg.get("local_addr"):
        cmd += ["--local-addr", str(cfg["local_addr"])]
    conf = {k: v for k, v in cfg["rdzv_configs"].items() if k != "rank"}
    if conf:
        cmd += ["--rdzv-conf", ",".join(f"{k}={v}" for k, v in conf.items())]
    cmd += ["--max-restarts", str(cfg["max_restarts"]), "--monitor-interval",
            f"{cfg['monitor_interval']:g}", "--start-method", str(cfg["start_method"]),
            "--role", str(cfg["role"])]
    if cfg.get("shutdown_timeout") is not None:
        cmd += ["--shutdown-timeout", str(cfg["shutdown_timeout"])]
    if plan.log_dir:
        cmd += ["--log-dir", plan.log_dir]
    if plan.tee != "0":
        cmd += ["--tee", plan.tee]
    return [*cmd, *_script_part(plan)]


def format_dry_run(resolved: Resolved, plan: LaunchPlan) -> str:
    """Settings that are not at their default (with their source), then the plan."""
    args, sources = resolved.args, resolved.sources
    lines = ["accel launch --dry_run: nothing was started.", ""]
    lines.append(f"config: {resolved.config.label if resolved.config else 'none'}")
    lines.append("")
    lines.append("settings (value  <- source):")
    for group in GROUPS:
        for flag in group.flags:
            if flag.unsupported or flag.dest in ("dry_run", "config_file"):
                continue
            source = sources.get(flag.dest, DEFAULT)
            value = getattr(args, flag.dest, None)
            if source == DEFAULT:
                continue
            lines.append(f"  {flag.dest} = {value!r}  <- {source}")
    for note in (*resolved.notes, *plan.warnings):
        lines.append(f"warning: {note}")
    lines.append("")
    cfg = plan.config
    endpoint = cfg["rdzv_endpoint"]
    if endpoint.endswith(":0"):
        endpoint = endpoint[:-2] + ":<free port picked at launch>"
    lines.append(f"processes on this machine: {cfg['nproc_per_node']} "
                 f"(machines {_nodes(cfg)}, rendezvous {cfg['rdzv_backend']} at "
                 f"{endpoint}, max_restarts {cfg['max_restarts']})")
    lines.append(f"worker command: {shlex.join(plan.command)}")
    lines.append("worker environment (added to the launcher's):")
    lines.extend(f"  {key}={value}" for key, value in sorted(plan.env.items()))
    lines.append("")
    machines = int(cfg["max_nodes"])
    lines.append("as torchrun, on each machine with the worker environment above (torchrun "
                 "lacks accel's checks before the rendezvous, its orphan guard and its stall "
                 "watchdog):")
    shown = range(machines) if machines <= _SHOWN_MACHINES else (0, 1, machines - 1)
    for rank in shown:
        if rank == machines - 1 and machines > _SHOWN_MACHINES:
            lines.append(f"  ... (machine ranks 2 to {machines - 2}: the same, --node-rank "
                         "changed)")
        lines.append(f"  machine rank {rank}: {shlex.join(torchrun_command(plan, rank))}")
    return "\n".join(lines) + "\n"
