"""`accel config`, `accel config default`, `accel config update`.

``accel config`` runs the questionnaire (:mod:`accel_launch.questionnaire`) and writes the
answers as YAML in Accelerate's schema to ``--config_file`` or the default location
($ACCEL_CONFIG_FILE / $ACCELERATE_CONFIG_FILE, else $HF_HOME/accelerate/default_config.yaml).
``default`` writes a config for this machine without questions (Accelerate's
``write_basic_config``); ``update`` rewrites an existing file in today's schema.
No torch import for ``--help``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

__all__ = ["DEFAULT_DESCRIPTION", "UPDATE_DESCRIPTION", "add_default_command",
           "add_update_command", "config_command", "default_config_command", "register",
           "update_config", "update_config_command", "write_basic_config"]

_PRECISIONS = ("no", "fp16", "bf16", "fp8")


def _cuda_devices() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _target(path: str | None) -> Path:
    from accel_launch.config_file import default_config_file

    return Path(path) if path else default_config_file()


def write_basic_config(mixed_precision: str = "no",
                       save_location: str | None = None) -> Path | bool:
    """A config for this machine (all its CUDA devices, else one CPU process), no questions.

    Returns the path written, or False when a file is already there (it is never overwritten).
    """
    from accel_state.errors import ConfigurationError

    from accel_launch.config_file import save_config
    from accel_launch.questionnaire import base_config

    if str(mixed_precision).lower() not in _PRECISIONS:
        raise ConfigurationError(f"mixed_precision {mixed_precision!r} is invalid: use one of "
                                 f"{', '.join(_PRECISIONS)}.")
    target = _target(save_location)
    if target.exists():
        print(f"Configuration already exists at {target}, will not override. Run "
              "`accel config` manually or pass a different --config_file.", file=sys.stderr)
        return False
    cfg = base_config()
    cfg["mixed_precision"] = str(mixed_precision).lower()
    gpus = _cuda_devices()
    if gpus > 1:
        cfg.update(distributed_type="MULTI_GPU", num_processes=gpus)
    elif gpus == 0:
        cfg["use_cpu"] = True
    return save_config(cfg, target)


def update_config(config_file: str | None = None) -> Path:
    """Rewrite a config file in today's schema (old keys migrated, defaults added)."""
    from accel_state.errors import ConfigurationError

    from accel_launch.config_file import _RENAMES, load_config_from_file, save_config
    from accel_launch.questionnaire import base_config

    target = _target(config_file)
    if not target.exists():
        raise ConfigurationError(f"config file {str(target)!r} not found: nothing to update. "
                                 "Run `accel config` to write one.")
    loaded = load_config_from_file(target)
    if loaded is None or loaded.kind != "yaml":
        raise ConfigurationError(f"{target} is a DeepSpeed JSON config, not an accel/"
                                 "Accelerate config: there is nothing to update.")
    data = dict(loaded.raw)
    if "fp16" in data:  # Accelerate < 0.12
        fp16 = data.pop("fp16")
        data.setdefault("mixed_precision", "fp16" if fp16 else "no")
    if "dynamo_backend" in data:  # Accelerate < 0.18
        data.setdefault("dynamo_config", {})["dynamo_backend"] = str(data.pop("dynamo_backend"))
    data.pop("ipex_config", None)  # IPEX is part of torch now
    for section, renames in _RENAMES.items():  # old key names -> today's
        content = data.get(section)
        for old, key in renames.items():
            if isinstance(content, dict) and old in content:
                value = content.pop(old)
                content.setdefault(key, value)
    for key in ("deepspeed_config", "fsdp_config"):
        if data.get(key) == {}:
            data.pop(key)
    merged = {**base_config(), **data}
    if merged.get("mixed_precision") is False:
        merged["mixed_precision"] = "no"
    save_config(merged, target)
    load_config_from_file(target)  # what we wrote must load
    return target


def config_command(args: argparse.Namespace) -> int:
    """Handler of `accel config` (the questionnaire)."""
    from accel_launch.config_file import load_config_from_file, save_config
    from accel_launch.prompts import Prompter
    from accel_launch.questionnaire import ask_config

    try:
        cfg = ask_config(Prompter(), _cuda_devices())
    except (EOFError, KeyboardInterrupt) as exc:
        print(f"\naccel config: stopped before the end ({exc or 'interrupted'}); nothing was "
              "written.", file=sys.stderr)
        return 1
    target = save_config(cfg, _target(args.config_file))
    load_config_from_file(target)
    print(f"accel configuration saved at {target}")
    return 0


def _default_command(args: argparse.Namespace) -> int:
    written = write_basic_config(args.mixed_precision, args.config_file)
    if written:
        print(f"accel configuration saved at {written}")
    return 0


def _update_command(args: argparse.Namespace) -> int:
    print(f"Successfully updated the configuration file at {update_config(args.config_file)}.")
    return 0


DEFAULT_DESCRIPTION = ("Write a basic config for this machine (all CUDA devices, else one CPU "
                       "process) unless one exists.")
UPDATE_DESCRIPTION = ("Load a config written by any Accelerate or accel version and rewrite it "
                      "with today's keys.")


#: Accelerate's names of the two sub-command handlers
default_config_command = _default_command
update_config_command = _update_command


def register(subparsers: Any) -> None:
    """Entry point of the ``accel.cli`` group: add ``config`` with ``default`` and ``update``."""
    parser = subparsers.add_parser(
        "config", help="Create a config file for `accel launch` by answering questions.",
        description="Ask about the machine, processes, engines and precision, then write a "
                    "config file in Accelerate's YAML schema (arrow-key menus in a terminal, "
                    "typed answers when stdin is piped).")
    parser.add_argument("--config_file", default=None, metavar="PATH",
                        help="Where to write (default: $ACCEL_CONFIG_FILE, "
                             "$ACCELERATE_CONFIG_FILE, else "
                             "$HF_HOME/accelerate/default_config.yaml).")
    parser.set_defaults(func=config_command)
    sub = parser.add_subparsers(title="subcommands", dest="config_subcommand", metavar="<sub>")
    add_default_command(sub)
    add_update_command(sub)


def add_default_command(sub: Any) -> argparse.ArgumentParser:
    """Add ``default`` (write a config for this machine) to the ``config`` sub-parsers."""
    default = sub.add_parser("default", help="Write a config for this machine, no questions.",
                             description=DEFAULT_DESCRIPTION)
    default.add_argument("--config_file", default=None, metavar="PATH",
                         help="Where to write (default: the default location).")
    default.add_argument("--mixed_precision", choices=_PRECISIONS, default="no",
                         help="Mixed precision to write (default no).")
    default.set_defaults(func=_default_command)
    return default


def add_update_command(sub: Any) -> argparse.ArgumentParser:
    """Add ``update`` (rewrite a config in today's schema) to the ``config`` sub-parsers."""
    update = sub.add_parser("update", help="Rewrite an existing config in today's schema.",
                            description=UPDATE_DESCRIPTION)
    update.add_argument("--config_file", default=None, metavar="PATH",
                        help="The file to update (default: the default location).")
    update.set_defaults(func=_update_command)
    return update
