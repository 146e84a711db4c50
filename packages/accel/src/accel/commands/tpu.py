"""Accelerate's ``accelerate.commands.tpu`` path: the ``tpu-config`` verb, refused (accel does
not run on TPUs); the objects are :mod:`accel_launch.tpu_command`'s."""

from __future__ import annotations

from accel_launch.tpu_command import tpu_command_launcher, tpu_command_parser

from accel._module_compat import forward_to

__all__ = ["main", "tpu_command_launcher", "tpu_command_parser"]


def main() -> int:
    """``accelerate tpu-config`` run as a script: the same refusal as `accel tpu-config`."""
    import sys

    from accel_launch.cli import main as accel_main

    return accel_main(["tpu-config", *sys.argv[1:]])


# Accelerate's incidental names (helpers its module happened to import), on first use
__getattr__ = forward_to(__name__, "accel.utils", "accel.commands.config.config_args")
