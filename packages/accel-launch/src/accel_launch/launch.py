"""`accel launch`: run a training script on N processes through torch's elastic agent.

This module only declares the flags (it is imported for ``accel --help``, so it must not
import torch); :mod:`accel_launch.launch_plan` turns them into a plan and
:mod:`accel_launch.elastic` runs it.
"""

from __future__ import annotations

import argparse
from typing import Any

from accel_launch.parser import AccelArgumentParser, AccelHelpFormatter

__all__ = ["launch_command", "launch_command_parser", "register"]

_DESCRIPTION = """\
Run SCRIPT on --num_processes processes (default: one per CUDA device, else one) through
torch's elastic agent, with RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT set
for every worker. --cpu really starts --num_processes CPU processes (gloo backend). If a
worker fails, the others are stopped and the launch exits with the failed worker's code.
Every flag also accepts the hyphenated spelling (--num-processes).
"""

class _Formatter(argparse.RawDescriptionHelpFormatter, AccelHelpFormatter):
    """Keeps the examples' line breaks and hides the flags' twin spellings."""


_EPILOG = """\
examples:
  accel launch --cpu --num_processes 2 train.py --lr 1e-3
  accel launch --num_processes 8 --mixed_precision bf16 -m my_pkg.train
  accel launch --num_machines 2 --machine_rank 0 --num_processes 16 \\
      --main_process_ip 10.0.0.1 --main_process_port 29400 train.py
"""


def _add_hardware_flags(parser: Any) -> None:
    group = parser.add_argument_group("hardware and processes")
    group.add_argument("--cpu", action="store_true",
                       help="Run on the CPU even if an accelerator is present (sets "
                            "ACCEL_USE_CPU=1; multi-process runs use gloo).")
    group.add_argument("--multi_gpu", action="store_true",
                       help="Start one process per GPU (the default when CUDA devices exist).")
    group.add_argument("--mixed_precision", choices=["no", "fp16", "bf16", "fp8"], default=None,
                       help="Mixed precision for the workers (sets ACCEL_MIXED_PRECISION).")
    group.add_argument("--num_processes", type=int, default=None, metavar="N",
                       help="Total processes over all machines (default: CUDA devices per "
                            "machine times --num_machines, or 1 per machine without CUDA).")
    group.add_argument("--num_machines", type=int, default=1, metavar="N",
                       help="Number of machines taking part (default 1).")
    group.add_argument("--machine_rank", type=int, default=0, metavar="RANK",
                       help="Rank of this machine, 0 .. --num_machines - 1 (default 0).")
    group.add_argument("--main_process_ip", default=None, metavar="IP",
                       help="Address of the machine with rank 0 (default 127.0.0.1; required "
                            "with --num_machines > 1).")
    group.add_argument("--main_process_port", type=int, default=None, metavar="PORT",
                       help="Rendezvous port on the rank-0 machine (default: a free port; "
                            "required with --num_machines > 1).")
    group.add_argument("--num_cpu_threads_per_process", type=int, default=None, metavar="N",
                       help="OMP_NUM_THREADS for each worker (default: keep the one set, "
                            "else cores // local processes).")


def _add_script_flags(parser: Any) -> None:
    group = parser.add_argument_group("script and output")
    group.add_argument("-m", "--module", action="store_true",
                       help="SCRIPT is a module name, run as `python -m SCRIPT`.")
    group.add_argument("--no_python", action="store_true",
                       help="Run SCRIPT directly instead of with `python` (any executable).")
    group.add_argument("--debug", action="store_true",
                       help="Check tensor shapes across ranks before collectives "
                            "(ACCEL_DEBUG_MODE=1) and show full launcher tracebacks.")
    group.add_argument("-q", "--quiet", action="store_true",
                       help="Only print errors from the launcher (the workers' output is kept).")


def _add_torchrun_flags(parser: Any) -> None:
    group = parser.add_argument_group("torch elastic (torchrun) options")
    group.add_argument("--max_restarts", type=int, default=0, metavar="N",
                       help="Restart the whole worker group up to N times after a failure "
                            "(default 0).")
    group.add_argument("--monitor_interval", type=float, default=0.1, metavar="SECONDS",
                       help="How often the agent checks the workers (default 0.1).")
    group.add_argument("--rdzv_backend", default="static", metavar="BACKEND",
                       help="Rendezvous backend: static (default), c10d, etcd, ...")
    group.add_argument("--rdzv_conf", default="", metavar="K=V,...",
                       help="Extra rendezvous settings, e.g. timeout=60.")
    group.add_argument("--log_dir", default=None, metavar="DIR",
                       help="Directory for the workers' log files (default: a temporary one).")
    group.add_argument("-t", "--tee", default="0", metavar="STD",
                       help="Also write worker output to log files: 0 none, 1 stdout, "
                            "2 stderr, 3 both, or per rank like 0:3,1:1.")
    group.add_argument("--role", default="default", metavar="NAME",
                       help="Name of the worker role in torch elastic's logs.")


def _fill(parser: Any) -> Any:
    _add_hardware_flags(parser)
    _add_script_flags(parser)
    _add_torchrun_flags(parser)
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
        description=_DESCRIPTION, epilog=_EPILOG,
        formatter_class=_Formatter))


def launch_command_parser(subparsers: Any = None) -> Any:
    """Accelerate-compatible name: the ``launch`` parser (a sub-parser when given one)."""
    if subparsers is not None:
        register(subparsers)
        return subparsers.choices["launch"]
    return _fill(AccelArgumentParser(prog="accel launch", description=_DESCRIPTION,
                                     epilog=_EPILOG, formatter_class=_Formatter))


def launch_command(args: argparse.Namespace) -> int:
    """Handler of `accel launch`: validate, plan, run; returns the exit code."""
    from accel_launch.elastic import run_launch

    return run_launch(args)
