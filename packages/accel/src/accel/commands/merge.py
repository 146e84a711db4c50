"""Accelerate's ``accelerate.commands.merge`` path: accel-checkpoint's
``accel merge-weights`` verb and ``merge_fsdp_weights``."""

from __future__ import annotations

from accel_checkpoint.cli_merge import merge_command
from accel_checkpoint.cli_merge import register as merge_command_register
from accel_checkpoint.merge import merge_fsdp_weights

__all__ = ["merge_command", "merge_command_register", "merge_fsdp_weights"]
