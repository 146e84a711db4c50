"""`accel launch --dry_run`: the resolved configuration, where each value came from, the
worker command and environment — printed, nothing started."""

from __future__ import annotations

import shlex

from accel_launch.flags import GROUPS
from accel_launch.launch_plan import LaunchPlan
from accel_launch.resolve import DEFAULT, Resolved

__all__ = ["format_dry_run"]


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
                 f"(machines {cfg['min_nodes']}, rendezvous {cfg['rdzv_backend']} at "
                 f"{endpoint}, max_restarts {cfg['max_restarts']})")
    lines.append(f"worker command: {shlex.join(plan.command)}")
    lines.append("worker environment (added to the launcher's):")
    lines.extend(f"  {key}={value}" for key, value in sorted(plan.env.items()))
    return "\n".join(lines) + "\n"
