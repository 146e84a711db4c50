"""`accel test`: launch accel's bundled end-to-end script under the current config.

The script (``accel/test_utils/scripts/test_script.py``, shipped with the ``accel``
facade) checks the process state, collectives, data sharding with ``gather_for_metrics``
and a short training run against a single-process reference, then prints a success line.
It is run through `accel launch` in a subprocess, exactly as a user's script would be.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import Any

__all__ = ["register", "run_selftest", "test_script_path"]


def test_script_path() -> Path:
    """The bundled script's path; a clear error when the ``accel`` facade is not installed."""
    from accel_state.errors import MissingDependencyError

    spec = importlib.util.find_spec("accel")
    if spec is None or not spec.submodule_search_locations:
        raise MissingDependencyError('`accel test` runs a script of the accel package: '
                                     'pip install "accel"')
    script = Path(next(iter(spec.submodule_search_locations))) / "test_utils" / "scripts" \
        / "test_script.py"
    if not script.is_file():
        raise MissingDependencyError(f"{script} is missing: reinstall accel "
                                     '(pip install --force-reinstall "accel").')
    return script


def run_selftest(args: argparse.Namespace) -> int:
    """Handler of `accel test`: returns the launch's exit code."""
    cmd = [sys.executable, "-m", "accel_launch", "launch"]
    if args.config_file:
        cmd += ["--config_file", args.config_file]
    cmd.append(str(test_script_path()))
    code = subprocess.call(cmd)
    if code == 0:
        print("accel test: the end-to-end test passed.")
    else:
        print(f"accel test: the end-to-end test failed (exit code {code}); see the output "
              "above.", file=sys.stderr)
    return code


def register(subparsers: Any) -> None:
    """Entry point of the ``accel.cli`` group: add ``test``."""
    parser = subparsers.add_parser(
        "test", help="Check that distributed training works with the current config.",
        description="Launch a short end-to-end script (state, collectives, data sharding, "
                    "training parity) with `accel launch` under the config file.")
    parser.add_argument("--config_file", default=None, metavar="PATH",
                        help="Config file to test (default: the default location).")
    parser.set_defaults(func=run_selftest)
