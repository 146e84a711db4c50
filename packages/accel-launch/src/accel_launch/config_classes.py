"""Accelerate's config-file classes: ``BaseConfig`` and its ``ClusterConfig`` /
``SageMakerConfig``, for code that builds or reads an Accelerate config in Python.

`accel launch` itself reads config files through :mod:`accel_launch.config_file` (one model,
with typo hints per key); these classes give scripts written against Accelerate's
``accelerate.commands.config.config_args`` the same objects: a dataclass per file with
``to_dict``, ``from_json_file`` / ``from_yaml_file`` (old keys migrated, unknown keys an
error naming them) and ``to_json_file`` / ``to_yaml_file``. ``SageMakerConfig`` has
Accelerate's fields, but building or loading one is refused: accel does not launch on
SageMaker.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from enum import Enum
from pathlib import Path
from typing import Any

from accel_state.enums import ComputeEnvironment, DistributedType, SageMakerDistributedType
from accel_state.errors import ConfigurationError

from accel_launch.config_file import default_json_config_file, default_yaml_config_file

__all__ = ["BaseConfig", "ClusterConfig", "SageMakerConfig", "SAGEMAKER_REFUSAL",
           "SAGEMAKER_PYTORCH_VERSION",
           "SAGEMAKER_PYTHON_VERSION", "SAGEMAKER_TRANSFORMERS_VERSION", "config_class_for",
           "load_config_object"]

SAGEMAKER_REFUSAL = ("Amazon SageMaker launches are not supported by accel; run `accel launch` "
                     "on the instances themselves with a LOCAL_MACHINE config (`accel config`).")
# Accelerate's SageMaker image defaults (the values of accelerate.utils.constants)
SAGEMAKER_PYTORCH_VERSION = "1.10.2"
SAGEMAKER_PYTHON_VERSION = "py38"
SAGEMAKER_TRANSFORMERS_VERSION = "4.17.0"
_SECTIONS = ("fp8_config", "deepspeed_config", "fsdp_config", "parallelism_config",
             "megatron_lm_config", "mpirun_config", "dynamo_config")


def _plain(value: Any) -> Any:
    """Enums as their values, nested dicts converted, empty dicts as None (dropped)."""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()} or None
    return value


@dataclass
class BaseConfig:
    """The keys every Accelerate config file has."""

    compute_environment: ComputeEnvironment
    """LOCAL_MACHINE or AMAZON_SAGEMAKER."""
    distributed_type: DistributedType | SageMakerDistributedType
    """How the processes train together (a SageMakerDistributedType on SageMaker)."""
    mixed_precision: str
    """no, fp16, bf16 or fp8."""
    use_cpu: bool
    """Train on CPU even where GPUs exist."""
    debug: bool
    """Check collectives' shapes across processes."""

    def __post_init__(self) -> None:
        self.compute_environment = ComputeEnvironment(_plain(self.compute_environment))
        enum = (SageMakerDistributedType
                if self.compute_environment == ComputeEnvironment.AMAZON_SAGEMAKER
                else DistributedType)
        try:
            self.distributed_type = enum(_plain(self.distributed_type))
        except ValueError:
            raise ConfigurationError(
                f"distributed_type {self.distributed_type!r} is not one of "
                f"{[m.value for m in enum]} ({self.compute_environment.value}): fix it in the "
                "config file or rewrite the file with `accel config`.") from None
        if getattr(self, "dynamo_config", None) is None:
            self.dynamo_config = {}

    def to_dict(self) -> dict[str, Any]:
        """The fields as plain YAML/JSON values; unset (None) and empty sections left out."""
        out = {f.name: _plain(getattr(self, f.name)) for f in fields(self)}
        return {k: v for k, v in out.items() if v is not None}

    @staticmethod
    def process_config(config_dict: dict[str, Any]) -> dict[str, Any]:
        """Fill the keys a config may leave out and migrate Accelerate's old spellings
        (``fp16: true``, a top-level ``dynamo_backend``), in place."""
        if "distributed_type" not in config_dict:
            raise ConfigurationError("the config has no distributed_type: add one (NO, "
                                     "MULTI_CPU, MULTI_GPU, FSDP, DEEPSPEED, ...) or rewrite "
                                     "the file with `accel config`.")
        config_dict.setdefault("compute_environment", ComputeEnvironment.LOCAL_MACHINE)
        if str(_plain(config_dict["distributed_type"])) == DistributedType.NO.value:
            config_dict.setdefault("num_processes", 1)
        legacy_fp16 = config_dict.pop("fp16", False)
        config_dict.setdefault("mixed_precision", "fp16" if legacy_fp16 else None)
        if "dynamo_backend" in config_dict:
            backend = config_dict.pop("dynamo_backend")
            config_dict["dynamo_config"] = ({} if str(backend).upper() == "NO"
                                            else {"dynamo_backend": backend})
        for key in ("use_cpu", "debug", "enable_cpu_affinity"):
            config_dict.setdefault(key, False)
        return config_dict

    @classmethod
    def _from_mapping(cls, data: Any, path: Path) -> BaseConfig:
        if not isinstance(data, dict):
            raise ConfigurationError(f"{path} holds {type(data).__name__}, not a mapping of "
                                     "config keys: rewrite it with `accel config`.")
        data = cls.process_config(dict(data))
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigurationError(
                f"The config file at {path} has unknown keys {unknown} for {cls.__name__}: "
                "remove or fix them (a newer Accelerate may have written them), or rewrite "
                "the file with `accel config update`.")
        return cls(**data)

    @classmethod
    def from_json_file(cls, json_file: str | Path | None = None) -> BaseConfig:
        """Read a JSON config (default: the one `accel config` writes)."""
        path = Path(json_file) if json_file is not None else default_json_config_file()
        return cls._from_mapping(json.loads(path.read_text(encoding="utf-8")), path)

    @classmethod
    def from_yaml_file(cls, yaml_file: str | Path | None = None) -> BaseConfig:
        """Read a YAML config (default: the one `accel config` writes)."""
        import yaml

        path = Path(yaml_file) if yaml_file is not None else default_yaml_config_file()
        return cls._from_mapping(yaml.safe_load(path.read_text(encoding="utf-8")), path)

    def to_json_file(self, json_file: str | Path) -> None:
        Path(json_file).write_text(json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n",
                                   encoding="utf-8")

    def to_yaml_file(self, yaml_file: str | Path) -> None:
        import yaml

        Path(yaml_file).write_text(yaml.safe_dump(self.to_dict()), encoding="utf-8")


@dataclass
class ClusterConfig(BaseConfig):
    """A config for machines accel launches on (``compute_environment: LOCAL_MACHINE``)."""

    num_processes: int = -1
    machine_rank: int = 0
    num_machines: int = 1
    gpu_ids: str | None = None
    main_process_ip: str | None = None
    main_process_port: int | None = None
    rdzv_backend: str | None = "static"
    same_network: bool | None = False
    main_training_function: str = "main"
    enable_cpu_affinity: bool = False
    fp8_config: dict | None = None
    deepspeed_config: dict | None = None
    fsdp_config: dict | None = None
    parallelism_config: dict | None = None
    megatron_lm_config: dict | None = None
    mpirun_config: dict | None = None
    downcast_bf16: bool = False
    tpu_name: str | None = None
    tpu_zone: str | None = None
    tpu_use_cluster: bool = False
    tpu_use_sudo: bool = False
    command_file: str | None = None
    commands: list[str] | None = None
    tpu_vm: list[str] | None = None
    tpu_env: list[str] | None = None
    dynamo_config: dict | None = None

    def __post_init__(self) -> None:
        for section in _SECTIONS:
            if getattr(self, section) is None:
                setattr(self, section, {})
        super().__post_init__()


@dataclass
class SageMakerConfig(BaseConfig):
    """Accelerate's SageMaker config: the fields exist; building one is refused."""

    ec2_instance_type: str
    iam_role_name: str
    image_uri: str | None = None
    profile: str | None = None
    region: str = "us-east-1"
    num_machines: int = 1
    gpu_ids: str = "all"
    base_job_name: str = "accelerate-sagemaker-1"
    pytorch_version: str = SAGEMAKER_PYTORCH_VERSION
    transformers_version: str = SAGEMAKER_TRANSFORMERS_VERSION
    py_version: str = SAGEMAKER_PYTHON_VERSION
    sagemaker_inputs_file: str | None = None
    sagemaker_metrics_file: str | None = None
    additional_args: dict | None = None
    dynamo_config: dict | None = None
    enable_cpu_affinity: bool = False

    def __post_init__(self) -> None:
        raise ConfigurationError("SageMakerConfig (compute_environment: AMAZON_SAGEMAKER) is "
                                 f"refused: {SAGEMAKER_REFUSAL}")


def config_class_for(data: dict[str, Any]) -> type[BaseConfig]:
    """ClusterConfig, or SageMakerConfig for a ``compute_environment: AMAZON_SAGEMAKER`` dict."""
    env = _plain(data.get("compute_environment", ComputeEnvironment.LOCAL_MACHINE))
    return SageMakerConfig if env == ComputeEnvironment.AMAZON_SAGEMAKER.value else ClusterConfig


def load_config_object(config_file: str | Path | None = None) -> BaseConfig:
    """Accelerate's ``load_config_from_file``: the file (default: the one `accel config`
    writes) as a :class:`ClusterConfig` (a SageMaker one is refused); JSON by its suffix,
    else YAML. `accel launch` reads files through ``accel_launch.config_file`` instead."""
    if config_file is not None:
        path = Path(config_file)
        if not path.is_file():
            raise FileNotFoundError(f"The passed configuration file `{config_file}` does not "
                                    "exist. Please pass an existing file to `accel launch`, "
                                    "or use the default one created through `accel config`.")
    else:
        from accel_launch.config_file import default_config_file

        path = default_config_file()
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json":
        return config_class_for(json.loads(text)).from_json_file(path)
    import yaml

    return config_class_for(yaml.safe_load(text) or {}).from_yaml_file(path)
