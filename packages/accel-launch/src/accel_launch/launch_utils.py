"""Accelerate's launch helpers (``accelerate.utils.launch``), built on accel's launch plan.

Code that builds launch environments itself (job schedulers, notebooks, test harnesses)
calls ``prepare_simple_launcher_cmd_env(args)`` & co. with the namespace of
:func:`accel_launch.launch.launch_command_parser`; they return the command and the full
environment (the current one plus the contract `accel launch` writes), exactly the
variables a real `accel launch` gives its workers.
"""

from __future__ import annotations

import argparse

from accel_state import env
from accel_state.errors import ConfigurationError

from accel_launch.elastic import find_free_port, is_port_in_use, probe_host
from accel_launch.launch_plan import LaunchPlan, build_launch_plan, validate_launch_args
from accel_launch.resolve import resolve_launch_args

__all__ = [
    "convert_dict_to_env_variables",
    "is_port_in_use",
    "prepare_deepspeed_cmd_env",
    "prepare_extend_env_parallelism_config",
    "prepare_multi_gpu_env",
    "prepare_simple_launcher_cmd_env",
]

convert_dict_to_env_variables = env.convert_dict_to_env_variables


def _plan(args: argparse.Namespace) -> LaunchPlan:
    resolved = resolve_launch_args(args)
    if args.main_process_port == 0 and args.num_machines == 1:
        # Accelerate's helpers read port 0 as "pick a free one" (one machine only: the
        # machines of a multi-machine job must agree on theirs, so 0 is refused there).
        args.main_process_port = find_free_port()
    validate_launch_args(args)
    port = args.main_process_port if args.main_process_port is not None else 29500
    return build_launch_plan(args, probe_host(args), port, resolved.sources)


def _full_env(plan: LaunchPlan) -> dict[str, str]:
    return {**env.snapshot(("",)), **plan.env}


def prepare_simple_launcher_cmd_env(args: argparse.Namespace) -> tuple[list[str], dict[str, str]]:
    """``(command, environment)`` of a one-process launch (no rendezvous variables)."""
    plan = _plan(args)
    return plan.command, _full_env(plan)


def _rendezvous_env(plan: LaunchPlan, args: argparse.Namespace) -> dict[str, str]:
    host, _, port = plan.config["rdzv_endpoint"].rpartition(":")
    out = _full_env(plan)
    env.MASTER_ADDR.set(host.strip("[]"), env=out)
    env.MASTER_PORT.set(port, env=out)
    args.master_port = port  # the port chosen, where Accelerate's helpers leave it
    env.NODE_RANK.set(args.machine_rank, env=out)
    env.WORLD_SIZE.set(plan.config["nproc_per_node"] * args.num_machines, env=out)
    env.LOCAL_WORLD_SIZE.set(plan.config["nproc_per_node"], env=out)
    return out


def prepare_multi_gpu_env(args: argparse.Namespace) -> dict[str, str]:
    """The environment of a multi-process launch (contract + rendezvous address).

    ``main_process_port=0`` picks a free port; ``args.master_port`` then names it. Only the
    environment is built, so a namespace without ``training_script`` is fine."""
    if not hasattr(args, "training_script"):
        args.training_script, args.training_script_args = "", []
    plan = _plan(args)
    return _rendezvous_env(plan, args)


def prepare_deepspeed_cmd_env(args: argparse.Namespace) -> tuple[list[str], dict[str, str]]:
    """``(command, environment)`` of a DeepSpeed launch; needs --use_deepspeed or a DS config."""
    plan = _plan(args)
    if not args.use_deepspeed:
        raise ConfigurationError("prepare_deepspeed_cmd_env needs --use_deepspeed (or a "
                                 "config file with distributed_type: DEEPSPEED / a DeepSpeed "
                                 "JSON as --config_file).")
    return plan.command, _rendezvous_env(plan, args)


def prepare_extend_env_parallelism_config(args: argparse.Namespace,
                                          current_env: dict[str, str]) -> dict[str, str]:
    """``current_env`` with ParallelismConfig switched on and a ``PARALLELISM_CONFIG_*``
    variable (canonical and Accelerate spelling) for each ``--parallelism_config_*`` flag
    ``args`` gives (a flag left unset is left to the worker's default); returns it."""
    from accel_launch.flags import GROUPS
    from accel_launch.worker_env import put

    put("ACCELERATE_USE_PARALLELISM_CONFIG", True, current_env)
    section = next(group for group in GROUPS if group.title == "ParallelismConfig")
    for flag in section.flags:
        value = getattr(args, flag.dest, None)
        if value is not None and flag.env is not None:
            put(flag.env, value, current_env)
    return current_env
