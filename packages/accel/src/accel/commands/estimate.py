"""Accelerate's ``accelerate.commands.estimate`` path: accel-inference's
``accel estimate-memory`` verb and the estimators behind it."""

from __future__ import annotations

from accel_inference.cli_estimate import estimate_command
from accel_inference.cli_estimate import register as estimate_command_register
from accel_inference.estimate import estimate_training, estimate_weights

__all__ = ["estimate_command", "estimate_command_register", "estimate_training",
           "estimate_weights"]
