"""Accelerate's ``accelerate.commands.config.config_utils`` path: the help formatter, the
dynamo backend names and the ``BulletMenu`` Accelerate's questions use (accel's questions
are ``accel_launch.prompts``)."""

from __future__ import annotations

from accel_launch.cli_compat import SubcommandHelpFormatter
from accel_launch.flags_plugins import DYNAMO_BACKENDS
from accel_launch.menu import BulletMenu

from accel._module_compat import forward_to

__all__ = ["BulletMenu", "DYNAMO_BACKENDS", "SubcommandHelpFormatter"]


# Accelerate's incidental names (helpers its module happened to import), on first use
__getattr__ = forward_to(__name__, "accel.utils", "accel.commands.config.config_args")
