"""Accelerate's ``accelerate.commands.merge`` path: accel-checkpoint's
``accel merge-weights`` verb and ``merge_fsdp_weights``."""

from __future__ import annotations

import argparse
from typing import Any

from accel_checkpoint.cli_merge import merge_command
from accel_checkpoint.cli_merge import register as merge_command_register
from accel_checkpoint.merge import merge_fsdp_weights
from accel_launch.cli_compat import CustomArgumentParser, verb_main
from accel_launch.parser import verb_parser

from accel._module_compat import forward_to

description = ("Merge the weights of a sharded checkpoint (every rank's shards) into one "
               "safetensors (or torch) file: `accel merge-weights CHECKPOINT_DIR OUTPUT_DIR`.")
main = verb_main("merge-weights")


def merge_command_parser(subparsers: Any = None) -> argparse.ArgumentParser:
    """The ``accel merge-weights`` parser (added to ``subparsers`` when given), as Accelerate
    names it."""
    return verb_parser(merge_command_register, "merge-weights", subparsers)


__all__ = ["merge_command", "merge_command_register", "merge_fsdp_weights", "CustomArgumentParser",
           "description", "main", "merge_command_parser"]


# Accelerate's incidental names (helpers its module happened to import), on first use
__getattr__ = forward_to(__name__, "accel.utils", "accel.commands.config.config_args",
                         "accel.big_modeling")
