"""``accel strategies``: the installed strategies and presets (package, priority, options
with types and defaults), and which one a launch would choose and why.

A verb of the facade (it reads both accel-launch's resolution of the flags and config file,
and accel-parallel's registry; neither may import the other). It takes every ``accel
launch`` flag, resolves them as a launch would (``--config_file``, the default config,
``--num_processes``, ``--use_fsdp``, ``--strategy``, ...), puts the workers' variables in
place for the moment of asking, and asks the same ``claims`` / ``check`` / ``choose`` the
workers will. Registering it imports nothing heavy (``accel --help`` stays fast).
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Iterator, Mapping
from types import SimpleNamespace
from typing import Any

__all__ = ["register", "strategies_command"]

_DESCRIPTION = """\
List the installed strategies (highest priority first: automatic selection asks them in
this order whether they claim the configuration) and presets (built only when named),
with the package that registers each and the options it takes (--strategy_config), then
say which strategy the launch described by the flags and config file would choose, how,
and what would refuse it. Takes every `accel launch` flag (no script). Handlers and
plugins a script passes in code (kwargs_handlers=, the plugin arguments, strategy=) are not
seen here; they take part the same way.
"""

_EPILOG = """\
examples:
  accel strategies
  accel strategies --cpu --num_processes 2
  accel strategies --config_file my_config.yaml
  accel strategies --use_parallelism_config --parallelism_config_tp_size 2 --num_processes 4
  accel strategies --strategy ddp --strategy_config '{"find_unused_parameters": true}'
"""


def register(subparsers: Any) -> None:
    """Entry point of the ``accel.cli`` group: add the ``strategies`` verb."""
    from accel_launch.flags import add_flags

    parser = subparsers.add_parser(
        "strategies", help="List installed strategies and presets; say which one a launch "
                           "would choose and why.",
        description=_DESCRIPTION, epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_flags(parser)
    parser.accel_flags_elsewhere = "launch.md#flags"  # docs/cli.md points there
    parser.set_defaults(func=strategies_command)


def strategies_command(args: argparse.Namespace) -> int:
    from accel_parallel.strategy_catalog import list_strategies

    print("\n".join(_listing(list_strategies())))
    print()
    print("\n".join(_choice(args)))
    return 0


def _listing(listed: list[Any]) -> list[str]:
    lines = ["strategies (automatic selection asks them in this order):"]
    for item in listed:
        if item.kind == "preset":
            continue
        lines.append(f"  {item.name:<22} priority {item.priority:<4} {item.package:<22} "
                     f"{item.summary}")
        lines.extend(_options(item.options))
    lines.append("presets (built only when named):")
    for item in listed:
        if item.kind != "preset":
            continue
        fixed = ", ".join(f"{k}={v!r}" for k, v in item.fixed.items())
        lines.append(f"  {item.name:<22} = {item.builds} with {fixed or 'no options'}  "
                     f"({item.package}) {item.summary}")
    return lines


def _options(fields: list[Any]) -> list[str]:
    if not fields:
        return ["      options: none"]
    return [f"      {f.name}: {f.type} = {f.default}" for f in fields]


def _choice(args: argparse.Namespace) -> list[str]:
    from accel_launch.elastic import probe_host
    from accel_launch.launch_plan import build_launch_plan
    from accel_launch.resolve import resolve_launch_args

    args.training_script, args.training_script_args = "<accel strategies>", []
    resolved = resolve_launch_args(args)
    host = probe_host(args)
    plan = build_launch_plan(args, host, 0, resolved.sources)
    processes = int(plan.config["nproc_per_node"]) * int(plan.config["max_nodes"])
    device = "cpu" if args.cpu or not host.cuda_device_count else "cuda"
    config_file = resolved.config.label if resolved.config is not None else "none"
    lines = [f"this launch: {processes} process(es) on {device}, config file: {config_file}"]
    with _worker_variables(plan.env):
        explanation = _explain(processes, device)
    lines.append("  asked by priority (claims: is this configuration mine; check: can it "
                 "run here):")
    for candidate in explanation.candidates:
        if candidate.claims is None:
            verdict = f"claims raised: {candidate.error}"
        elif not candidate.claims:
            verdict = "does not claim it"
        elif candidate.unmet:
            verdict = "claims it; cannot run here: " + "; ".join(
                u.condition for u in candidate.unmet)
        else:
            verdict = "claims it"
        mark = "  <- chosen" if candidate.name == explanation.chosen else ""
        lines.append(f"    {candidate.name:<22} {candidate.priority:<4} {verdict}{mark}")
    if explanation.chosen is not None:
        lines.append(f"  would run: {explanation.chosen!r} ({explanation.route})")
    if explanation.refusal:
        lines.append(f"  would be refused: {explanation.refusal}")
    return lines


def _explain(processes: int, device: str) -> Any:
    """The workers' view of the configuration (their variables are in place)."""
    import torch
    from accel_parallel import StrategyConfig
    from accel_parallel.choosing import RunEnvironment
    from accel_parallel.plugins import resolve_plugins
    from accel_parallel.strategy_catalog import Explanation, explain
    from accel_precision import NoPrecision
    from accel_state import AccelError

    state = SimpleNamespace(num_processes=processes, use_distributed=processes > 1,
                            device=torch.device(device), process_index=0,
                            local_process_index=0, is_main_process=True)
    try:
        plugins = resolve_plugins().plugins
    except AccelError as error:
        return Explanation(None, "", [], refusal=str(error))
    config = StrategyConfig(state=state, precision=NoPrecision(device=state.device),
                            plugins=plugins)
    # a process group exists in every worker of a multi-process launch
    environment = RunEnvironment(num_processes=processes, device_type=device,
                                 process_group=processes > 1)
    return explain(config, environment)


@contextlib.contextmanager
def _worker_variables(variables: Mapping[str, str]) -> Iterator[None]:
    """The workers' environment, in this process for the moment of asking, then restored
    (the strategies read their variables through accel_state.env)."""
    saved = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
