"""Resolve `accel launch`'s settings: command line > config file > cluster (SLURM/MPI) >
defaults, remembering for every value which source won (``--dry_run`` prints it).

Also the checks that need all sources together: a plugin flag given without its plugin,
two engines at once, refused platforms. Pure apart from reading the config file and the
environment through :mod:`accel_state.env`; no torch.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass, field
from typing import Any

from accel_state import env
from accel_state.errors import ConfigurationError

from accel_launch.config_file import ConfigFile, load_config_from_file
from accel_launch.flags import Flag, all_flags, flag_by_dest

__all__ = ["Resolved", "cluster_defaults", "first_slurm_host", "resolve_launch_args",
           "slurm_port"]

CLI = "command line"
DEFAULT = "default"

#: Flags that only mean something with a plugin on: group title -> (enabling dest, fix).
_NEEDS = {
    "DeepSpeed": ("use_deepspeed", "--use_deepspeed"),
    "FSDP": ("use_fsdp", "--use_fsdp"),
    "ParallelismConfig": ("use_parallelism_config", "--use_parallelism_config"),
    "fp8": ("mixed_precision", "--mixed_precision fp8"),
}
_DS_REFUSED = ("deepspeed_hostfile", "deepspeed_exclusion_filter", "deepspeed_inclusion_filter")


@dataclass
class Resolved:
    """The launch settings after resolution."""

    args: argparse.Namespace
    """Every flag destination filled in."""
    sources: dict[str, str] = field(default_factory=dict)
    """Destination -> where its value came from (command line, config file X, SLURM, default)."""
    config: ConfigFile | None = None
    """The config file used, if any."""
    notes: list[str] = field(default_factory=list)
    """Warnings for the user."""
    plugin_flags_checked: bool = False
    """Whether the plugin-flag check ran (Accelerate's ``_validate_launch_command`` defers it
    to the launch itself)."""


def refuse_unsupported(args: argparse.Namespace, sources: dict[str, str] | None = None) -> None:
    """TPU, SageMaker and Megatron-LM flags: one clear error instead of a silent no-op.

    A flag holding Accelerate's default (``megatron_lm_tp_degree=1`` next to
    ``use_megatron_lm=False``, as a namespace built for Accelerate has it) asks for nothing
    and passes. With ``sources``, the error says where a config-file value came from."""
    for flag in all_flags():
        value = getattr(args, flag.dest, None)
        if flag.unsupported and value not in (None, False, []) and str(value) not in flag.inert:
            source = (sources or {}).get(flag.dest, CLI)
            key = flag.config[1] if flag.config else flag.dest
            where = "" if source == CLI else f" ({key}={value!r} from {source})"
            raise ConfigurationError(f"{flag.name}{where} is not supported by accel launch: "
                                     f"{flag.unsupported}")


def first_slurm_host(nodelist: str) -> str:
    """First host of a SLURM node list: ``node[03-05,9],gpu1`` -> ``node03``."""
    depth, end = 0, len(nodelist)
    for i, ch in enumerate(nodelist):
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            end = i
            break
    first = nodelist[:end].strip()
    match = re.fullmatch(r"([^\[]*)\[([^\]]+)\](.*)", first)
    if not match:
        return first
    prefix, ranges, suffix = match.groups()
    return prefix + re.split(r"[-,]", ranges)[0] + suffix


def slurm_port() -> int | None:
    """The rendezvous port every node of a SLURM job agrees on without being told:
    $MASTER_PORT when the batch script exports one, else 15000 + (job id % 10000) (below
    Linux's ephemeral range, so no outgoing connection holds it; one job's nodes share it)."""
    port = env.MASTER_PORT.get_int()
    if port is not None:
        return port
    job = env.SLURM_JOB_ID.get()
    return 15000 + int(job) % 10000 if job and job.isdigit() else None


def cluster_defaults() -> tuple[dict[str, Any], str | None]:
    """Machines / rank / rank-0 host / port when `accel launch` runs once per node under
    srun, or machines / rank under mpirun."""
    nodelist = env.SLURM_NODELIST.raw()
    nnodes = env.SLURM_NNODES.get_int()
    if nodelist is not None and nodelist[0] == "SLURM_STEP_NODELIST" and nnodes:
        if env.SLURM_NTASKS.get_int() in (None, nnodes):  # one launcher per node
            found = {"num_machines": nnodes, "machine_rank": env.SLURM_NODEID.get_int(0),
                     "main_process_ip": first_slurm_host(nodelist[1])}
            port = slurm_port()
            if port is not None:
                found["main_process_port"] = port
            return found, "SLURM (srun, one task per node)"
    size = env.MPI_SIZE.get_int()
    if size and size > 1:
        return {"num_machines": size, "machine_rank": env.MPI_RANK.get_int(0)}, \
            "MPI (mpirun, one launcher per machine)"
    return {}, None


def _given(flag: Flag, value: Any) -> bool:
    """Whether the namespace asks for ``value``: None is "not given", and so is a switch's
    False (the parser's default, as in Accelerate: a switch cannot be turned off on the
    command line, so False must not hide the config file's true), and so is a flag's
    :attr:`~accel_launch.flags.Flag.parser_default`."""
    if value is None or (flag.kind == "switch" and value is False):
        return False
    return flag.parser_default is None or value != flag.parser_default


def _fill(resolved: Resolved, cfg: ConfigFile | None, cluster: dict[str, Any],
          cluster_label: str | None) -> None:
    args = resolved.args
    for flag in all_flags():
        dest = flag.dest
        if _given(flag, getattr(args, dest, None)):
            resolved.sources[dest] = CLI
        elif cfg is not None and cfg.values.get(dest) is not None:
            setattr(args, dest, cfg.values[dest])
            resolved.sources[dest] = cfg.label
        elif dest in cluster:
            setattr(args, dest, cluster[dest])
            resolved.sources[dest] = cluster_label or "cluster"
        else:
            setattr(args, dest, flag.default)
            resolved.sources[dest] = DEFAULT


def _check_plugin_flags(resolved: Resolved) -> None:
    """A plugin's flag on the command line needs the plugin on (from any source).

    An "off" value (false, 0: Accelerate's defaults, which a namespace built for its
    helpers carries for every plugin) asks nothing of the plugin and passes."""
    from accel_launch.flags import GROUPS

    args = resolved.args
    for group in GROUPS:
        need = _NEEDS.get(group.title)
        if need is None:
            continue
        dest, fix = need
        enabled = args.mixed_precision == "fp8" if dest == "mixed_precision" else bool(
            getattr(args, dest))
        for flag in group.flags:
            if flag.dest == dest or resolved.sources.get(flag.dest) != CLI or enabled or \
                    getattr(args, flag.dest) in (False, 0):
                continue
            raise ConfigurationError(
                f"{flag.name} only applies with {fix}: add {fix} (or set it in the config "
                f"file), or drop {flag.name}.")


def _check_strategy(resolved: Resolved) -> None:
    """``--strategy_config`` gives options to the strategy ``--strategy`` names: alone it has
    no strategy to go to. The name and the options' types are checked against the strategy's
    entry point here, before any worker starts (:mod:`accel_launch.strategy_check`)."""
    args, src = resolved.args, resolved.sources
    if args.strategy_config and not args.strategy:
        raise ConfigurationError(
            f"--strategy_config (from {src['strategy_config']}) gives options but no strategy "
            "is named: add --strategy NAME (or strategy: NAME in the config file).")
    if args.strategy:
        from accel_launch.strategy_check import check_named_strategy

        check_named_strategy(args.strategy, args.strategy_config,
                             name_source=src.get("strategy", CLI),
                             options_source=f"--strategy_config (from "
                                            f"{src.get('strategy_config', CLI)})")


def _check_stall_timeout(resolved: Resolved) -> None:
    """A config file's ``stall_timeout`` / ``startup_timeout`` is refused naming the file,
    before anything starts (the flags and the variable are checked with the launch plan)."""
    from accel_launch.watchdog import parse_stall_timeout

    for key in ("stall_timeout", "startup_timeout"):
        source = resolved.sources.get(key, "")
        if resolved.config is not None and source == resolved.config.label:
            parse_stall_timeout(getattr(resolved.args, key), f"{key} in {source}")


def _check_engines(resolved: Resolved) -> None:
    args, src = resolved.args, resolved.sources
    if args.use_deepspeed and args.use_fsdp:
        raise ConfigurationError(
            f"DeepSpeed (from {src['use_deepspeed']}) and FSDP (from {src['use_fsdp']}) cannot "
            "be combined: choose one engine.")
    for dest in _DS_REFUSED:
        if getattr(args, dest):
            raise ConfigurationError(
                f"--{dest} (from {src[dest]}) is not supported: DeepSpeed's pdsh launcher is "
                "replaced by running `accel launch --num_machines N --machine_rank R "
                "--main_process_ip IP --main_process_port P` on every machine.")
    launcher = args.deepspeed_multinode_launcher
    if launcher and str(launcher).lower() != "standard":
        raise ConfigurationError(
            f"--deepspeed_multinode_launcher {launcher!r} (from "
            f"{src['deepspeed_multinode_launcher']}) is not supported: only 'standard' (accel "
            "launch on every machine).")
    if args.mpirun_hostfile:
        raise ConfigurationError(
            "--mpirun_hostfile is not supported: accel starts CPU workers itself (`accel launch "
            "--cpu --num_processes N`); for many machines run `accel launch` once per machine "
            "(it detects srun and mpirun).")
    if args.deepspeed_config_file and src.get("zero_stage") == CLI and args.zero_stage is not None:
        raise ConfigurationError(
            f"--zero_stage {args.zero_stage} conflicts with the DeepSpeed config file "
            f"{args.deepspeed_config_file} (from {src['deepspeed_config_file']}), which sets "
            "the stage itself: set zero_optimization.stage in the JSON, or drop the file.")


def resolve_launch_args(args: argparse.Namespace, *,
                        check_plugin_flags: bool = True) -> Resolved:
    """Fill every flag of ``args`` from the sources, in precedence order, and check them.

    Idempotent: the result is remembered on ``args`` (a second call returns it, running the
    plugin-flag check if an earlier call left it out with ``check_plugin_flags=False``, as
    Accelerate's ``_validate_launch_command``, which does not refuse them, does).
    """
    done = getattr(args, "_accel_resolved", None)
    if done is not None:
        if check_plugin_flags and not done.plugin_flags_checked:
            _check_plugin_flags(done)
            done.plugin_flags_checked = True
        return done
    refuse_unsupported(args)
    cfg = load_config_from_file(getattr(args, "config_file", None))
    resolved = Resolved(args=args, config=cfg)
    if cfg is not None:
        resolved.notes.extend(cfg.notes)
        cfg.values.pop("config_file", None)
    cluster, label = cluster_defaults()
    _fill(resolved, cfg, cluster, label)
    refuse_unsupported(args, resolved.sources)  # refused settings a config file holds
    if cfg is not None:
        args.config_file = str(cfg.path)
        if resolved.sources.get("config_file") != CLI:
            resolved.sources["config_file"] = "default location"
    from accel_launch.membership import resolve_machine_range

    resolve_machine_range(args, resolved.sources)
    if args.max_restarts and args.rdzv_backend == "static":
        args.rdzv_backend = "c10d"
        resolved.sources["rdzv_backend"] += " (static -> c10d: restarts need a re-rendezvous)"
    if check_plugin_flags:
        _check_plugin_flags(resolved)
        resolved.plugin_flags_checked = True
    _check_engines(resolved)
    _check_strategy(resolved)
    _check_stall_timeout(resolved)
    args._accel_resolved = resolved
    return resolved


def flag_name(dest: str) -> str:
    """``num_processes`` -> ``--num_processes`` (for messages)."""
    flag = flag_by_dest().get(dest)
    return flag.name if flag else f"--{dest}"
