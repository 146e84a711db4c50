"""`accel to-fsdp2`: convert a config file's FSDP1 settings to FSDP2 keys.

FSDP2 (``fully_shard``) has no sharding-strategy enum, backward/forward prefetch policy,
``use_orig_params`` or ``sync_module_states``: the strategy becomes
``fsdp_reshard_after_forward`` (FULL_SHARD/HYBRID_SHARD -> true, SHARD_GRAD_OP/_HYBRID_SHARD_ZERO2
-> false) and the options with no FSDP2 meaning are dropped (each one reported).
"""

from __future__ import annotations

import argparse
import enum
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["ARGUMENT_KEY_MAPPING", "ARGUMENT_VALUE_MAPPING", "ConversionStatus",
           "convert_config_to_fsdp2", "convert_with_notes", "load_config", "register",
           "to_fsdp2_command"]


_log = logging.getLogger(__name__)


class ConversionStatus(enum.Enum):
    """Why an FSDP1 key has no FSDP2 key (Accelerate's names)."""

    NOT_YET_IMPLEMENTED = 0
    REMOVED = -1


#: FSDP1 key -> its FSDP2 key, or why it is dropped. Keys not listed are carried over.
ARGUMENT_KEY_MAPPING: dict[str, str | ConversionStatus] = {
    **{key: key for key in (
        "fsdp_version", "fsdp_reshard_after_forward", "fsdp_auto_wrap_policy",
        "fsdp_cpu_ram_efficient_loading", "fsdp_offload_params", "fsdp_state_dict_type",
        "fsdp_transformer_layer_cls_to_wrap", "fsdp_min_num_params",
        "fsdp_activation_checkpointing")},
    "fsdp_sharding_strategy": "fsdp_reshard_after_forward",
    "fsdp_backward_prefetch": ConversionStatus.REMOVED,
    "fsdp_backward_prefetch_policy": ConversionStatus.REMOVED,
    "fsdp_forward_prefetch": ConversionStatus.NOT_YET_IMPLEMENTED,
    "fsdp_sync_module_states": ConversionStatus.REMOVED,
    "fsdp_use_orig_params": ConversionStatus.REMOVED,
}

#: sharding strategy (by name or FSDP1's enum number) -> fsdp_reshard_after_forward.
#: NO_SHARD is absent on purpose: it is DDP, and the conversion refuses it saying so.
_RESHARD = {"FULL_SHARD": True, "HYBRID_SHARD": True, "SHARD_GRAD_OP": False,
            "HYBRID_SHARD_ZERO2": False, "_HYBRID_SHARD_ZERO2": False,
            "1": True, "2": False, "4": True, "5": False}
#: FSDP1 key -> {FSDP1 value -> FSDP2 value} for the renamed keys whose values change
ARGUMENT_VALUE_MAPPING: dict[str, dict[str, bool]] = {
    "fsdp_sharding_strategy": _RESHARD, "fsdp_reshard_after_forward": _RESHARD}
_DROPPED = tuple(key for key, status in ARGUMENT_KEY_MAPPING.items()
                 if isinstance(status, ConversionStatus))


def load_config(config_file: str | Path) -> dict[str, Any]:
    """The mapping a YAML (or JSON) config file holds; a missing or empty file is an error."""
    import yaml
    from accel_state.errors import ConfigurationError

    from accel_launch._file_errors import ConfigFileNotFoundError

    path = Path(config_file)
    if not path.is_file():
        raise ConfigFileNotFoundError(f"config file {str(path)!r} not found: check the path, "
                                      "or run `accel config` to write one.")
    config = yaml.safe_load(path.read_text())
    if not config:
        raise ConfigurationError(f"config file {str(path)!r} is empty: nothing to convert.")
    if not isinstance(config, dict):
        raise ConfigurationError(f"config file {str(path)!r} holds a "
                                 f"{type(config).__name__}, not a mapping of settings.")
    return config


def convert_config_to_fsdp2(config: dict[str, Any]) -> dict[str, Any]:
    """The config with FSDP2 keys (Accelerate's signature: a dict back); a config that is
    FSDP2 already comes back unchanged. ``config`` itself is left as it was."""
    return convert_with_notes(config)[0]


def convert_with_notes(config: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """``(new config, notes)``: the conversion, and one line per key renamed or dropped."""
    from accel_state.errors import ConfigurationError

    fsdp = dict(config.get("fsdp_config") or {})
    notes: list[str] = []
    if not fsdp:
        raise ConfigurationError("the config has no fsdp_config section: nothing to convert "
                                 "(run `accel config` and choose FSDP).")
    if int(fsdp.get("fsdp_version", 1)) == 2:
        return config, ["Config already specifies FSDP2, skipping conversion... (fsdp_version "
                        "is 2: nothing changed; if its keys are FSDP1's, set fsdp_version 1 and "
                        "run again)"]
    strategy = fsdp.pop("fsdp_sharding_strategy", None)
    if strategy is not None:
        key = str(strategy).upper()  # ARGUMENT_VALUE_MAPPING's keys
        if key in ("NO_SHARD", "3"):
            raise ConfigurationError(
                "fsdp_sharding_strategy NO_SHARD has no FSDP2 equivalent: use distributed_type "
                "MULTI_GPU (DDP) instead of FSDP.")
        if key not in _RESHARD:
            raise ConfigurationError(f"fsdp_sharding_strategy {strategy!r} is unknown: use "
                                     "FULL_SHARD, SHARD_GRAD_OP or HYBRID_SHARD.")
        fsdp.setdefault("fsdp_reshard_after_forward", _RESHARD[key])
        notes.append(f"fsdp_sharding_strategy {strategy} -> fsdp_reshard_after_forward "
                     f"{_RESHARD[key]}")
    for key in _DROPPED:
        if key in fsdp:
            notes.append(f"{key} removed (no FSDP2 equivalent)")
            fsdp.pop(key)
    fsdp["fsdp_version"] = 2
    return {**config, "fsdp_config": fsdp}, notes


def to_fsdp2_command(args: argparse.Namespace,
                     read: Callable[[str], dict[str, Any]] | None = None) -> int:
    """Convert ``--config_file``; a missing input raises ``FileNotFoundError``, an existing
    output without ``--overwrite`` ``FileExistsError`` (both also ``ConfigurationError``).
    Each key renamed or dropped is a warning of the ``accel_launch.to_fsdp2`` logger, as
    Accelerate logs them (with no logging set up, Python prints warnings on stderr).
    ``read`` (path -> settings) replaces the checked file reader: Accelerate's module reads
    through its ``load_config``, which code and tests replace."""
    from accel_state.errors import ConfigurationError

    from accel_launch._file_errors import ConfigFileNotFoundError, OutputFileExistsError
    from accel_launch.config_file import load_config_from_file, save_config

    source = Path(args.config_file)
    if not source.is_file():
        raise ConfigFileNotFoundError(f"config file {str(source)!r} not found: check the "
                                      "path, or run `accel config` to write one.")
    target = Path(args.output_file) if args.output_file else source
    if target == source and not args.overwrite:
        raise ConfigurationError("pass --output_file NEW.yaml, or --overwrite to replace "
                                 f"{source} in place.")
    if target.exists() and target != source and not args.overwrite:
        raise OutputFileExistsError(f"{target} exists: pass --overwrite to replace it.")
    if read is not None:
        settings = read(str(source))
    else:
        loaded = load_config_from_file(source)
        if loaded is None or loaded.kind != "yaml":
            raise ConfigurationError(f"{source} is not an accel/Accelerate config file.")
        settings = loaded.raw
    converted, notes = convert_with_notes(settings)
    save_config(converted, target)
    load_config_from_file(target)
    for note in notes:
        _log.warning("accel to-fsdp2: %s", note)
    print(f"FSDP2 config written to {target}")
    return 0


def register(subparsers: Any) -> None:
    """Entry point of the ``accel.cli`` group: add ``to-fsdp2``."""
    parser = subparsers.add_parser(
        "to-fsdp2", help="Convert a config file's FSDP1 settings to FSDP2.",
        description="Rewrite fsdp_config for FSDP2: sharding strategy -> "
                    "fsdp_reshard_after_forward, FSDP1-only options removed.")
    parser.add_argument("--config_file", required=True, metavar="PATH",
                        help="The config file to convert.")
    parser.add_argument("--output_file", default=None, metavar="PATH",
                        help="Where to write the converted config.")
    parser.add_argument("--overwrite", action="store_true",
                        help="Replace --output_file (or --config_file itself) if it exists.")
    parser.set_defaults(func=to_fsdp2_command)

