"""Accelerate's ``accelerate.commands.config.config_args`` path: the config-file locations
and writer of accel-launch, and Accelerate's ``BaseConfig`` / ``ClusterConfig`` /
``SageMakerConfig`` classes (``accel_launch.config_classes``); ``load_config_from_file``
returns a ``ClusterConfig``, as Accelerate's does. `accel launch` itself reads files
through ``ConfigFile``."""

from __future__ import annotations

from accel_launch.config_classes import (
    SAGEMAKER_PYTHON_VERSION,
    SAGEMAKER_PYTORCH_VERSION,
    SAGEMAKER_TRANSFORMERS_VERSION,
    BaseConfig,
    ClusterConfig,
    SageMakerConfig,
)
from accel_launch.config_classes import load_config_object as load_config_from_file
from accel_launch.config_file import (
    ConfigFile,
    cache_dir,
    default_config_file,
    default_json_config_file,
    default_yaml_config_file,
    save_config,
)

from accel._module_compat import forward_to

#: Accelerate's Hugging Face cache folder ($HF_HOME, else $XDG_CACHE_HOME/huggingface)
hf_cache_home = str(cache_dir().parent)

__all__ = ["BaseConfig", "ClusterConfig", "ConfigFile", "SAGEMAKER_PYTHON_VERSION",
           "SAGEMAKER_PYTORCH_VERSION", "SAGEMAKER_TRANSFORMERS_VERSION", "SageMakerConfig",
           "cache_dir", "default_config_file", "default_json_config_file",
           "default_yaml_config_file", "hf_cache_home", "load_config_from_file", "save_config"]


# Accelerate's incidental names (helpers its module happened to import), on first use
__getattr__ = forward_to(__name__, "accel.utils")
