"""The environment `accel launch` hands its workers, built from resolved settings.

Every variable is declared in :mod:`accel_state.env`; the flag table names each one by
Accelerate's spelling (``ACCELERATE_USE_FSDP``, ``FSDP_SHARDING_STRATEGY``, ...). Workers
get both our canonical ``ACCEL_*`` name and Accelerate's, so code that reads Accelerate's
variables directly (transformers' ``TrainingArguments``, user scripts) keeps working.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from typing import Any

from accel_state import env
from accel_state.errors import ConfigurationError

from accel_launch.flags import GROUPS, Flag, parse_bool

__all__ = ["env_var", "plugin_env", "put"]

CLI = "command line"
_SECTION_OF_ENGINE = {"DeepSpeed": "use_deepspeed", "FSDP": "use_fsdp",
                      "ParallelismConfig": "use_parallelism_config"}


def env_var(name: str) -> env.EnvVar:
    """The declared variable whose name or alias is ``name``."""
    for var in env.ENV_VARS.values():
        if name in var.names:
            return var
    raise ConfigurationError(
        f"{name} is not declared in accel_state.env, so this accel-launch cannot pass the "
        "setting on: upgrade accel-state (pip install -U accel-state).")


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):  # a mapping flag (--strategy_config): JSON, as workers read it
        import json

        return json.dumps(value, sort_keys=True)
    return str(value)


def put(name: str, value: Any, out: dict[str, str]) -> None:
    """Write the variable known as ``name`` under its canonical and its Accelerate spelling."""
    var = env_var(name)
    var.set(_text(value), env=out)
    if name != var.name:
        out[name] = _text(value)


def _override_linear_precision(text: str, out: dict[str, str]) -> None:
    parts = [p.strip() for p in str(text).strip("()[] ").split(",")]
    try:
        fprop, dgrad, wgrad = (parse_bool(p) for p in parts)
    except (ValueError, Exception):
        raise ConfigurationError(
            f"--fp8_override_linear_precision {text!r} is invalid: give three booleans "
            "(fprop, dgrad, wgrad), e.g. (false, false, true).") from None
    put("ACCELERATE_FP8_OVERRIDE_FPROP", fprop, out)
    put("ACCELERATE_FP8_OVERRIDE_DGRAD", dgrad, out)
    put("ACCELERATE_FP8_OVERRIDE_WGRAD", wgrad, out)


def _group_active(title: str, args: argparse.Namespace) -> bool:
    if title in _SECTION_OF_ENGINE:
        return bool(getattr(args, _SECTION_OF_ENGINE[title]))
    if title == "fp8":
        return args.mixed_precision == "fp8"
    if title == "torch.compile (dynamo)":
        return args.dynamo_backend not in (None, "no", "NO")
    return True


def _write_flag(flag: Flag, value: Any, out: dict[str, str]) -> None:
    if flag.dest == "fp8_override_linear_precision":
        _override_linear_precision(value, out)
    elif flag.env is not None:
        put(flag.env, value, out)


def plugin_env(args: argparse.Namespace, sources: Mapping[str, str]) -> dict[str, str]:
    """Variables for every flag that has a value and whose plugin is on."""
    out: dict[str, str] = {}
    ds_fields: list[str] = []
    for group in GROUPS:
        if not _group_active(group.title, args):
            continue
        for flag in group.flags:
            value = getattr(args, flag.dest, None)
            if value is None or flag.unsupported or flag.env is None and \
                    flag.dest != "fp8_override_linear_precision":
                continue
            if flag.kind == "switch" and value is False:
                continue
            if flag.dest == "mixed_precision" and value == "no" and sources.get(flag.dest) != CLI:
                continue  # let the script's Accelerator(mixed_precision=...) decide
            _write_flag(flag, value, out)
            if group.title == "DeepSpeed" and flag.dest != "deepspeed_config_file":
                ds_fields.append(flag.dest)
    if args.use_deepspeed and ds_fields:
        put("ACCELERATE_CONFIG_DS_FIELDS", ",".join(ds_fields), out)
    if args.gpu_ids not in (None, "", "all"):
        env.VISIBLE_DEVICES.set(str(args.gpu_ids).replace(" ", ""), env=out)
    return out
