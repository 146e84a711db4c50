"""Accelerate's ``accelerate.commands.config.config_args`` path: accel-launch's config file
model (``ConfigFile`` is what Accelerate splits into ``ClusterConfig``/``SageMakerConfig``)."""

from __future__ import annotations

from accel_launch.config_file import (
    ConfigFile,
    cache_dir,
    default_config_file,
    default_json_config_file,
    default_yaml_config_file,
    load_config_from_file,
    save_config,
)

__all__ = ["ConfigFile", "cache_dir", "default_config_file", "default_json_config_file",
           "default_yaml_config_file", "load_config_from_file", "save_config"]
