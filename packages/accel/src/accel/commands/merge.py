"""Accelerate's ``accelerate.commands.merge`` path: accel-checkpoint's
``accel merge-weights`` verb and ``merge_fsdp_weights``."""

from __future__ import annotations

from accel_checkpoint.cli_merge import merge_command
from accel_checkpoint.cli_merge import register as merge_command_register
from accel_checkpoint.merge import merge_fsdp_weights

from accel._module_compat import forward_to

__all__ = ["merge_command", "merge_command_register", "merge_fsdp_weights"]


# Accelerate's incidental names (helpers its module happened to import), on first use
__getattr__ = forward_to(__name__, "accel.utils", "accel.commands.config.config_args",
                         "accel.big_modeling")
