"""`accel launch`: run a training script on N processes through torch's elastic agent.

This module only declares the flags (it is imported for ``accel --help``, so it must not
import torch); :mod:`accel_launch.launch_plan` turns them into a plan and
:mod:`accel_launch.elastic` runs it.
"""

from __future__ import annotations

import argparse
from typing import Any

from accel_launch.flags import add_flags
from accel_launch.parser import AccelArgumentParser, AccelHelpFormatter

__all__ = ["_validate_launch_command", "launch_command", "launch_command_parser", "register"]

_DESCRIPTION = """\
Run SCRIPT on --num_processes processes (default: one per CUDA device, else one) through
torch's elastic agent, with RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT set
for every worker. --cpu really starts --num_processes CPU processes (gloo backend). If a
worker fails, the others are stopped and the launch exits with the failed worker's code.
Every flag also accepts the hyphenated spelling (--num-processes). Values come from the
command line, else the config file (--config_file, else the one `accel config` wrote), else
the defaults; --dry_run shows which source gave each one.
"""

class _Formatter(argparse.RawDescriptionHelpFormatter, AccelHelpFormatter):
    """Keeps the examples' line breaks and hides the flags' twin spellings."""


_USAGE = "accel launch [flags] SCRIPT [script args ...]   (flags: see below)"

_EPILOG = """\
examples:
  accel launch --cpu --num_processes 2 train.py --lr 1e-3
  accel launch --num_processes 8 --mixed_precision bf16 -m my_pkg.train
  accel launch --config_file deepspeed_config.json train.py
  accel launch --dry_run --use_fsdp --num_processes 8 train.py
  accel launch --num_machines 2 --machine_rank 0 --num_processes 16 \\
      --main_process_ip 10.0.0.1 --main_process_port 29400 train.py
"""


def _fill(parser: Any) -> Any:
    add_flags(parser)
    parser.add_argument("training_script", metavar="SCRIPT",
                        help="Path of the script to run (a module name with -m, a program "
                             "with --no_python).")
    parser.add_argument("training_script_args", nargs=argparse.REMAINDER, metavar="...",
                        help="Arguments for SCRIPT, passed through untouched.")
    parser.set_defaults(func=launch_command)
    return parser


def register(subparsers: Any) -> None:
    """Entry point of the ``accel.cli`` group: add the ``launch`` verb."""
    _fill(subparsers.add_parser(
        "launch", help="Run a training script on one or many processes.",
        description=_DESCRIPTION, epilog=_EPILOG, usage=_USAGE,
        formatter_class=_Formatter))


def launch_command_parser(subparsers: Any = None) -> Any:
    """Accelerate-compatible name: the ``launch`` parser (a sub-parser when given one)."""
    if subparsers is not None:
        register(subparsers)
        return subparsers.choices["launch"]
    return _fill(AccelArgumentParser(prog="accel launch", description=_DESCRIPTION,
                                     epilog=_EPILOG, usage=_USAGE, formatter_class=_Formatter))


def launch_command(args: argparse.Namespace) -> int:
    """Handler of `accel launch`: validate, plan, run; returns the exit code."""
    from accel_launch.elastic import run_launch

    return run_launch(args)


def _validate_launch_command(args: argparse.Namespace) -> tuple[argparse.Namespace, Any, bool]:
    """Accelerate's first step of a launch, for code (and its tests) that call it directly:
    fill ``args`` from the command line > config file > defaults and check them, in place.

    Returns ``(args, config, mp_from_config_flag)``: the config file read (an
    :class:`accel_launch.config_file.ConfigFile`, None without one) and whether
    ``mixed_precision`` came from it. As in Accelerate, a plugin's flag without its plugin
    is not refused here; `accel launch` (``launch_command``) still refuses it.
    """
    from accel_launch.launch_plan import validate_launch_args
    from accel_launch.resolve import resolve_launch_args

    validate_launch_args(args, check_plugin_flags=False)
    resolved = resolve_launch_args(args, check_plugin_flags=False)
    config = resolved.config
    from_config = config is not None and resolved.sources.get("mixed_precision") == config.label
    return args, config, from_config
