"""`accel tpu-config`: Accelerate's verb that runs setup commands on a TPU pod, refused.

accel does not run on TPUs, but a script or CI job written for Accelerate may call the verb:
it parses Accelerate's flags (so a typo is still named) and then fails with the reason,
instead of argparse's "invalid choice".
"""

from __future__ import annotations

import argparse
from typing import Any

from accel_launch.parser import AccelArgumentParser

__all__ = ["TPU_REFUSAL", "register", "tpu_command_launcher", "tpu_command_parser"]

TPU_REFUSAL = ("TPU pods (torch_xla) are not supported by accel; run `accel launch` on CPU "
               "or CUDA machines, and run setup commands on them with your own tooling.")
_HELP = "Accelerate's TPU-pod setup verb: refused (accel does not run on TPUs)."


def _fill(parser: Any) -> Any:
    parser.add_argument("--config_file", default=None, help="Accepted, then refused.")
    parser.add_argument("--tpu_name", default=None, help="Accepted, then refused.")
    parser.add_argument("--tpu_zone", default=None, help="Accepted, then refused.")
    parser.add_argument("--use_alpha", action="store_true", help="Accepted, then refused.")
    parser.add_argument("--command_file", default=None, help="Accepted, then refused.")
    parser.add_argument("--command", action="append", nargs="+", help="Accepted, then refused.")
    parser.add_argument("--install_accelerate", action="store_true",
                        help="Accepted, then refused.")
    parser.add_argument("--accelerate_version", default="latest", help="Accepted, then refused.")
    # not `debug`: the CLI shows a traceback for args.debug, and this is a plain refusal
    parser.add_argument("--debug", dest="tpu_debug", action="store_true",
                        help="Accepted, then refused.")
    parser.set_defaults(func=tpu_command_launcher)
    return parser


def register(subparsers: Any) -> None:
    """Entry point of the ``accel.cli`` group: add the ``tpu-config`` verb."""
    _fill(subparsers.add_parser("tpu-config", help=_HELP, description=_HELP))


def tpu_command_parser(subparsers: Any = None) -> Any:
    """Accelerate-compatible name: the ``tpu-config`` parser (a sub-parser when given one)."""
    if subparsers is not None:
        register(subparsers)
        return subparsers.choices["tpu-config"]
    return _fill(AccelArgumentParser(prog="accel tpu-config", description=_HELP))


def tpu_command_launcher(args: argparse.Namespace) -> int:
    """Handler of `accel tpu-config`: always the refusal, naming the TPU it was asked for."""
    from accel_state.errors import ConfigurationError

    pod = f" (--tpu_name {args.tpu_name})" if getattr(args, "tpu_name", None) else ""
    raise ConfigurationError(f"accel tpu-config{pod} is not supported: {TPU_REFUSAL}")
