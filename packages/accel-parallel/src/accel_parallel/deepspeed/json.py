"""DeepSpeed JSON configs: reading one (a path, a dict or an ``HfDeepSpeedConfig``) and
looking values up by dotted key. Nothing here imports DeepSpeed."""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from accel_state import ConfigurationError

__all__ = ["AUTO", "HfDeepSpeedConfig", "is_auto", "load_json"]

AUTO = "auto"
_OFFLOAD_KINDS = ("offload_optimizer", "offload_param")


def is_auto(value: Any) -> bool:
    return isinstance(value, str) and value == AUTO


def load_json(source: Any) -> dict[str, Any]:
    if isinstance(source, HfDeepSpeedConfig):
        return copy.deepcopy(source.config)
    if isinstance(source, Mapping):
        return copy.deepcopy(dict(source))
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if not path.is_file():
            raise ConfigurationError(
                f"DeepSpeedPlugin(hf_ds_config={str(source)!r}): no such file. Give the path of "
                "a DeepSpeed JSON config, or the config as a dict.")
        try:
            loaded = json.loads(path.read_text())
        except json.JSONDecodeError as error:
            raise ConfigurationError(
                f"DeepSpeed config {path} is not valid JSON: {error}.") from None
        if not isinstance(loaded, dict):
            raise ConfigurationError(f"DeepSpeed config {path} must hold a JSON object.")
        return loaded
    raise ConfigurationError(
        f"DeepSpeedPlugin(hf_ds_config={source!r}) must be a path of a DeepSpeed JSON config, a "
        "dict or an HfDeepSpeedConfig.")


class HfDeepSpeedConfig:
    """A DeepSpeed config (path or dict) with lookups by dotted key, as in transformers /
    Accelerate. Holds the config; nothing is imported from DeepSpeed."""

    def __init__(self, config_file_or_dict: Any) -> None:
        self.config = load_json(config_file_or_dict)

    def find_config_node(self, ds_key_long: str) -> tuple[dict[str, Any] | None, str]:
        node: Any = self.config
        *parents, key = ds_key_long.split(".")
        for name in parents:
            node = node.get(name) if isinstance(node, dict) else None
            if node is None:
                return None, key
        return node, key

    def get_value(self, ds_key_long: str, default: Any = None) -> Any:
        node, key = self.find_config_node(ds_key_long)
        return default if node is None else node.get(key, default)

    def is_true(self, ds_key_long: str) -> bool:
        value = self.get_value(ds_key_long)
        return False if value is None else bool(value)

    def is_false(self, ds_key_long: str) -> bool:
        value = self.get_value(ds_key_long)
        return False if value is None else not bool(value)

    def is_zero3(self) -> bool:
        return self.get_value("zero_optimization.stage") == 3

    def is_offload(self) -> bool:
        return any(self.get_value(f"zero_optimization.{k}.device") in ("cpu", "nvme")
                   for k in _OFFLOAD_KINDS)
