"""Accelerate's ``accelerate.commands.test`` path: accel-launch's ``accel test`` verb
(``test_command(args)`` runs the bundled check script, as Accelerate's does)."""

from __future__ import annotations

import argparse
from typing import Any

from accel_launch.cli_compat import verb_main
from accel_launch.parser import verb_parser
from accel_launch.selftest import register as test_command_register
from accel_launch.selftest import run_selftest as test_command
from accel_launch.selftest import test_script_path

from accel._module_compat import forward_to

main = verb_main("test")

__all__ = ["test_command", "test_command_parser", "test_command_register", "test_script_path",
           "main"]


def test_command_parser(subparsers: Any = None) -> argparse.ArgumentParser:
    """The ``accel test`` parser (added to ``subparsers`` when given), as Accelerate names it."""
    return verb_parser(test_command_register, "test", subparsers)


#: Accelerate's module imports these from test_utils; loaded on first use, so `accel test`
#: (and ``import accel.commands.test``) does not import unittest and the decorators.
_FROM_TEST_UTILS = ("execute_subprocess_async", "path_in_accelerate_package")
# Accelerate's incidental names (helpers its module happened to import), on first use
_forward = forward_to(__name__, "accel.utils", "accel.commands.config.config_args",
                      "accel.big_modeling")


def __getattr__(name: str) -> Any:
    if name in _FROM_TEST_UTILS:
        from accel.test_utils import testing

        return getattr(testing, name)
    return _forward(name)
