"""`accel env`: the facts a bug report needs, as one block to paste.

:func:`collect_env_info` gathers them (versions of every installed ``accel``/``accel-*``
distribution, torch, Python, platform, CPUs, memory, accelerators and the ``ACCEL_*`` /
``ACCELERATE_*`` variables set), :func:`format_env_info` renders them. torch is imported
only when the command runs, never for ``accel --help``.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import sys
from importlib import metadata
from typing import Any

__all__ = ["accel_distributions", "collect_env_info", "env_command", "format_env_info",
           "register"]

_ACCEL_DIST = re.compile(r"^accel([-_.].+)?$")


def accel_distributions() -> dict[str, str]:
    """``{name: version}`` of every installed ``accel`` or ``accel-*`` distribution."""
    found: dict[str, str] = {}
    for dist in metadata.distributions():
        name = (dist.metadata["Name"] or "").strip()
        normal = re.sub(r"[-_.]+", "-", name).lower()
        if _ACCEL_DIST.match(normal):
            found.setdefault(normal, dist.version)
    return dict(sorted(found.items()))


def _memory_gib() -> str:
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return "unknown"
    return f"{total / 2**30:.1f} GiB"


def _accelerators(torch: Any) -> dict[str, str]:
    info: dict[str, str] = {}
    if torch.cuda.is_available():
        count = torch.cuda.device_count()
        names = ", ".join(torch.cuda.get_device_name(i) for i in range(count))
        info["CUDA devices"] = f"{count} ({names})"
        info["CUDA version"] = str(torch.version.cuda or torch.version.hip or "unknown")
    else:
        info["CUDA devices"] = "none"
    accel = getattr(torch, "accelerator", None)
    if accel is not None and accel.is_available():
        device = accel.current_accelerator()
        if device is not None and device.type != "cuda":
            info[f"{device.type.upper()} devices"] = str(accel.device_count())
    return info


def collect_env_info() -> dict[str, str]:
    """Label -> value, in the order they are printed."""
    import torch
    from accel_state import env

    info = {f"{name} version": version for name, version in accel_distributions().items()}
    info["torch version"] = torch.__version__
    info["Python version"] = platform.python_version()
    info["Python executable"] = sys.executable
    info["Platform"] = platform.platform()
    info["CPU count"] = str(os.cpu_count() or "unknown")
    info["Memory"] = _memory_gib()
    info.update(_accelerators(torch))
    variables = env.snapshot()
    info["ACCEL_*/ACCELERATE_* variables"] = (
        "".join(f"\n    {k}={v}" for k, v in variables.items()) if variables else "none")
    return info


def format_env_info(info: dict[str, str]) -> str:
    """The block users paste into an issue."""
    lines = ["Copy-and-paste the text below in your bug report.", ""]
    lines += [f"- {label}: {value}" for label, value in info.items()]
    return "\n".join(lines) + "\n"


def config_info(config_file: str | None = None) -> str:
    """The config file `accel launch` would use and its content (or why there is none)."""
    from accel_launch.config_file import default_config_file, load_config_from_file

    path = config_file or str(default_config_file())
    try:
        loaded = load_config_from_file(config_file)
    except Exception as exc:  # a broken file is worth reporting, not a crash of `accel env`
        return f"{path} (cannot be loaded: {exc})"
    if loaded is None:
        return f"none ({path} does not exist; run `accel config`)"
    body = "".join(f"\n    {k}: {v}" for k, v in sorted(loaded.raw.items()))
    return f"{loaded.label}{body}"


def env_command(args: argparse.Namespace) -> int:
    """Handler of `accel env`."""
    info = collect_env_info()
    info["accel config"] = config_info(getattr(args, "config_file", None))
    sys.stdout.write(format_env_info(info))
    return 0


def register(subparsers: Any) -> None:
    """Entry point of the ``accel.cli`` group: add the ``env`` verb."""
    parser = subparsers.add_parser(
        "env", help="Print versions, platform and accelerator details for a bug report.",
        description="Print accel/torch/Python versions, the platform, CPUs, memory, "
                    "accelerator devices, the ACCEL_*/ACCELERATE_* variables set and the "
                    "config file in use, as one block to paste into a bug report.")
    parser.add_argument("--config_file", default=None, metavar="PATH",
                        help="Config file to show (default: the one `accel launch` uses).")
    parser.set_defaults(func=env_command)
