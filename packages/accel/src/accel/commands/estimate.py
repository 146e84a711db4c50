"""Accelerate's ``accelerate.commands.estimate`` path: accel-inference's
``accel estimate-memory`` verb, the estimators behind it and the steps of Accelerate's
command under its names (``accel_inference.estimate_helpers``)."""

from __future__ import annotations

import argparse
from typing import Any

from accel_inference.cli_estimate import estimate_command
from accel_inference.cli_estimate import register as estimate_command_register
from accel_inference.estimate import estimate_training, estimate_weights
from accel_inference.estimate_helpers import (
    add_timm_hub_prefix,
    check_has_model,
    create_ascii_table,
    create_empty_model,
    estimate_training_usage,
    gather_data,
    verify_on_hub,
)
from accel_launch.cli_compat import CustomArgumentParser, verb_main
from accel_launch.parser import verb_parser

from accel._module_compat import forward_to

main = verb_main("estimate-memory")

__all__ = ["estimate_command", "estimate_command_parser", "estimate_command_register",
           "estimate_training", "estimate_weights", "CustomArgumentParser", "main",
           "add_timm_hub_prefix", "check_has_model", "create_ascii_table", "create_empty_model",
           "estimate_training_usage", "gather_data", "verify_on_hub"]


def estimate_command_parser(subparsers: Any = None) -> argparse.ArgumentParser:
    """The ``accel estimate-memory`` parser (added to ``subparsers`` when given), as
    Accelerate names it."""
    return verb_parser(estimate_command_register, "estimate-memory", subparsers)


# Accelerate's incidental names (helpers its module happened to import), on first use
__getattr__ = forward_to(__name__, "accel.utils", "accel.commands.config.config_args",
                         "accel.big_modeling")
