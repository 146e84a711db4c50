"""Config files of `accel launch` / `accel config`: Accelerate's YAML schema, read as is.

Files written by every Accelerate release from 0.11 on load (their old keys are accepted:
``fp16``, a top-level ``dynamo_backend``, ``fsdp_backward_prefetch_policy``, ``ipex_config``,
``mpirun_config``, the TPU and SageMaker keys Accelerate writes even for local runs). An
unknown key is an error naming the closest valid one; a value of the wrong type names key,
value and expected type. A JSON file with DeepSpeed's keys given as ``--config_file`` is
recognised as a DeepSpeed config.

The schema is derived from the flag table (:mod:`accel_launch.flags`): each flag with a
``config`` location is a key. No torch import here.
"""

from __future__ import annotations

import copy
import difflib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accel_state import env
from accel_state.errors import ConfigurationError

from accel_launch.flags import Flag, all_flags, match_choice, parse_bool, parse_mapping

__all__ = [
    "ConfigFile",
    "DISTRIBUTED_TYPES",
    "cache_dir",
    "config_schema",
    "default_config_file",
    "default_json_config_file",
    "default_yaml_config_file",
    "is_deepspeed_json",
    "load_config_from_file",
    "save_config",
]

DISTRIBUTED_TYPES = ("NO", "MULTI_CPU", "MULTI_GPU", "MULTI_XPU", "MULTI_NPU", "MULTI_MLU",
                     "MULTI_MUSA", "MULTI_SDAA", "MULTI_HPU", "DEEPSPEED", "FSDP", "MEGATRON_LM",
                     "XLA", "TPU")
_MULTI_DEVICE = {"MULTI_GPU", "MULTI_XPU", "MULTI_NPU", "MULTI_MLU", "MULTI_MUSA", "MULTI_SDAA",
                 "MULTI_HPU"}

# Keys Accelerate writes that carry nothing for accel (TPU/SageMaker/IPEX settings of local
# configs): accepted so every Accelerate file loads, with their expected type.
_ACCEPTED: dict[str, str] = {
    "compute_environment": "str", "distributed_type": "str", "fp16": "bool",
    "dynamo_backend": "str", "tpu_name": "str", "tpu_zone": "str", "tpu_use_cluster": "bool",
    "tpu_use_sudo": "bool", "command_file": "str", "commands": "any", "tpu_vm": "any",
    "tpu_env": "any", "ec2_instance_type": "str", "iam_role_name": "str", "image_uri": "str",
    "profile": "str", "region": "str", "base_job_name": "str", "pytorch_version": "str",
    "transformers_version": "str", "py_version": "str", "sagemaker_inputs_file": "str",
    "sagemaker_metrics_file": "str", "additional_args": "any", "use_cpu": "bool",
}
_SECTIONS = ("deepspeed_config", "fsdp_config", "dynamo_config", "fp8_config",
             "parallelism_config", "megatron_lm_config", "mpirun_config", "ipex_config")
_SECTION_EXTRAS: dict[str, dict[str, str]] = {
    "mpirun_config": {"mpirun_ccl": "any"},
    "ipex_config": {"ipex": "bool", "use_xpu": "bool"},
    "megatron_lm_config": {},  # any key: the whole section is refused when used
}
# Keys whose value now lives under another name (section -> old key -> today's key).
_RENAMES = {"fp8_config": {"amax_history_length": "amax_history_len",
                           "amax_compute_algorithm": "amax_compute_algo",
                           "optimization_level": "opt_level"},
            "fsdp_config": {"fsdp_backward_prefetch_policy": "fsdp_backward_prefetch"}}
_DS_MARKERS = {"train_batch_size", "train_micro_batch_size_per_gpu", "zero_optimization",
               "gradient_accumulation_steps", "fp16", "bf16", "optimizer", "scheduler",
               "gradient_clipping", "zero_allow_untested_optimizer", "steps_per_print"}


def cache_dir() -> Path:
    """Accelerate's config folder: $HF_HOME/accelerate, else
    $XDG_CACHE_HOME/huggingface/accelerate."""
    hf_home = env.HF_HOME.get()
    if hf_home:
        return Path(hf_home) / "accelerate"
    xdg = env.XDG_CACHE_HOME.get() or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(xdg) / "huggingface" / "accelerate"


def default_yaml_config_file() -> Path:
    return cache_dir() / "default_config.yaml"


def default_json_config_file() -> Path:
    return cache_dir() / "default_config.json"


def default_config_file() -> Path:
    """$ACCEL_CONFIG_FILE / $ACCELERATE_CONFIG_FILE, else the YAML (or legacy JSON) in the cache."""
    explicit = env.CONFIG_FILE.get()
    if explicit:
        return Path(explicit)
    yaml_file = default_yaml_config_file()
    if not yaml_file.exists() and default_json_config_file().exists():
        return default_json_config_file()
    return yaml_file


def config_schema() -> dict[str, dict[str, Flag]]:
    """``{section: {key: Flag}}`` ("" is the top level) from the flag table."""
    schema: dict[str, dict[str, Flag]] = {"": {}}
    for section in _SECTIONS:
        schema[section] = {}
    for flag in all_flags():
        if flag.config is not None:
            schema[flag.config[0]][flag.config[1]] = flag
    return schema


@dataclass
class ConfigFile:
    """A loaded config file: its values by flag destination, and what it asks for."""

    path: Path
    """Where it was read from."""
    kind: str
    """``yaml`` (Accelerate's schema) or ``deepspeed_json`` (a DeepSpeed config)."""
    raw: dict[str, Any]
    """The file's content as read (after old-key renames)."""
    values: dict[str, Any] = field(default_factory=dict)
    """Flag destination -> value."""
    notes: list[str] = field(default_factory=list)
    """Things worth a warning (ignored keys with a value)."""

    @property
    def label(self) -> str:
        what = "DeepSpeed JSON" if self.kind == "deepspeed_json" else "config file"
        return f"{what} {self.path}"

    def to_dict(self) -> dict[str, Any]:
        """The file's content as read (a copy: editing it leaves this config alone), as
        Accelerate's configs give it; ``accel config update`` renames old keys."""
        return copy.deepcopy(self.raw)

    def to_yaml_file(self, yaml_file: str | os.PathLike[str]) -> Path:
        """Write the config as YAML (Accelerate's ``to_yaml_file``); it loads back equal."""
        if self.kind == "deepspeed_json":
            raise ConfigurationError(
                f"{self.path} is a DeepSpeed JSON config, which `accel launch` only recognises "
                "as JSON: use to_json_file(path) with a .json path.")
        return _write(self.to_dict(), Path(yaml_file), "yaml")

    def to_json_file(self, json_file: str | os.PathLike[str]) -> Path:
        """Write the config as JSON (Accelerate's ``to_json_file``); it loads back equal."""
        return _write(self.to_dict(), Path(json_file), "json")


def _closest(key: str, known: list[str], where: str, path: Path) -> ConfigurationError:
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.5)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    what = "value" if where.startswith("distributed_type") else "key"
    return ConfigurationError(f"{path}: unknown {what} {where}{key!r}{hint}; valid: "
                              f"{', '.join(sorted(set(known)))}.")


def _check_type(kind: str, key: str, value: Any, path: Path, choices: tuple[str, ...] = ()) -> Any:
    """The value converted to the flag's type, or an error naming key, value and type."""
    if value is None or kind == "any":
        return value
    expected = {"int": "an integer", "float": "a number", "bool": "true or false",
                "switch": "true or false", "str": "a string", "choice": "one of "
                + ", ".join(choices), "multi": "a list",
                "mapping": "a mapping of option: value (or a JSON object)"}[kind]
    try:
        if kind == "int" and not isinstance(value, bool):
            if isinstance(value, int) or (isinstance(value, str) and value.strip().isdigit()):
                return int(value)
        elif kind == "float" and not isinstance(value, bool):
            return float(value)
        elif kind in ("bool", "switch"):
            return parse_bool(value)
        elif kind == "str" and not isinstance(value, (dict, list)):
            return str(value)
        elif kind == "multi" and isinstance(value, list):
            return value
        elif kind == "mapping":
            return parse_mapping(value, key)
        elif kind == "choice":
            found = match_choice("no" if value is False else value, choices)
            if found is not None:
                return found
    except (ValueError, TypeError, Exception):
        pass
    raise ConfigurationError(f"{path}: key {key!r} has value {value!r} of type "
                             f"{type(value).__name__}; expected {expected}.")


def is_deepspeed_json(path: Path, text: str | None = None) -> bool:
    """A JSON object with DeepSpeed's keys (train_batch_size, zero_optimization, ...)."""
    if text is None:
        text = path.read_text()
    if not text.lstrip().startswith("{"):
        return False
    try:
        data = json.loads(text)
    except ValueError:
        return False
    return isinstance(data, dict) and bool(_DS_MARKERS & set(data))


def _read_mapping(path: Path, text: str) -> dict[str, Any]:
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ConfigurationError(f"{path} is not valid JSON ({exc}): fix it or "
                                     "regenerate it with `accel config`.") from None
    else:
        import yaml

        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigurationError(f"{path} is not valid YAML ({str(exc).splitlines()[0]}): "
                                     "fix it or regenerate it with `accel config`.") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigurationError(f"{path} must hold a mapping of keys (compute_environment, "
                                 f"num_processes, ...), not a {type(data).__name__}.")
    return data


def _load_section(name: str, content: Any, schema: dict[str, Flag], path: Path,
                  cfg: ConfigFile) -> None:
    if content is None:
        return
    if not isinstance(content, dict):
        raise ConfigurationError(f"{path}: key {name!r} must be a mapping, not {content!r}.")
    extras = _SECTION_EXTRAS.get(name, {})
    for key, value in content.items():
        if name == "megatron_lm_config":
            continue
        flag = schema.get(key)
        renamed = _RENAMES.get(name, {}).get(key)
        if flag is None and renamed is not None:
            flag = schema.get(renamed)
            if renamed in content:  # both spellings: today's wins
                continue
        if flag is None:
            if key in extras:
                _check_type(extras[key], f"{name}.{key}", value, path)
                continue
            raise _closest(key, [*schema, *extras], f"in {name}: ", path)
        cfg.values[flag.dest] = _check_type(flag.kind, f"{name}.{key}", value, path,
                                            flag.choices)


def _apply_distributed_type(cfg: ConfigFile, data: dict[str, Any]) -> None:
    path = cfg.path
    compute = data.get("compute_environment") or "LOCAL_MACHINE"
    if compute != "LOCAL_MACHINE":
        raise ConfigurationError(f"{path}: compute_environment {compute!r} is not supported by "
                                 "accel (Amazon SageMaker): use LOCAL_MACHINE and run `accel "
                                 "launch` on the machines themselves.")
    dtype = str(data.get("distributed_type") or "NO").upper()
    if dtype not in DISTRIBUTED_TYPES:
        raise _closest(dtype, list(DISTRIBUTED_TYPES), "distributed_type ", path)
    if dtype in ("XLA", "TPU"):
        raise ConfigurationError(f"{path}: distributed_type {dtype} (TPU) is not supported by "
                                 "accel; use NO, MULTI_CPU, MULTI_GPU, DEEPSPEED or FSDP.")
    if dtype == "MEGATRON_LM":
        from accel_launch.flags_plugins import _MEGATRON

        raise ConfigurationError(f"{path}: distributed_type MEGATRON_LM is refused. {_MEGATRON}")
    if dtype == "MULTI_CPU":  # the workers use the CPU, whatever use_cpu says
        cfg.values["cpu"] = True
    elif dtype in _MULTI_DEVICE:
        cfg.values["multi_gpu"] = True
    elif dtype == "DEEPSPEED":
        cfg.values["use_deepspeed"] = True
    elif dtype == "FSDP":
        cfg.values["use_fsdp"] = True
    if any(v is not None for v in (data.get("parallelism_config") or {}).values()):
        cfg.values["use_parallelism_config"] = True


def _load_yaml_schema(path: Path, data: dict[str, Any]) -> ConfigFile:
    schema = config_schema()
    cfg = ConfigFile(path=path, kind="yaml", raw=data)
    top = schema[""]
    known = [*top, *_ACCEPTED, *_SECTIONS]
    for key, value in data.items():
        if key in _SECTIONS:
            _load_section(key, value, schema[key], path, cfg)
        elif key in top:
            cfg.values[top[key].dest] = _check_type(top[key].kind, key, value, path,
                                                    top[key].choices)
        elif key in _ACCEPTED:
            _check_type(_ACCEPTED[key], key, value, path)
        else:
            raise _closest(key, known, "", path)
    if data.get("fp16") and "mixed_precision" not in cfg.values:  # Accelerate < 0.12
        cfg.values["mixed_precision"] = "fp16"
    if data.get("dynamo_backend") and "dynamo_backend" not in cfg.values:  # Accelerate < 0.18
        backends = schema["dynamo_config"]["dynamo_backend"].choices
        cfg.values["dynamo_backend"] = _check_type("choice", "dynamo_backend",
                                                   data["dynamo_backend"], path, backends)
    _apply_distributed_type(cfg, data)
    if cfg.values.get("mpirun_hostfile"):
        cfg.notes.append(f"{path}: mpirun_config.mpirun_hostfile is ignored: accel starts the "
                         "CPU workers itself (run `accel launch` on each machine).")
        cfg.values.pop("mpirun_hostfile")
    return cfg


def load_config_from_file(config_file: str | os.PathLike[str] | None = None) -> ConfigFile | None:
    """Load ``config_file`` (default: :func:`default_config_file` if it exists, else None)."""
    if config_file is None:
        path = default_config_file()
        if not path.exists():
            return None
    else:
        path = Path(config_file)
        if not path.is_file():
            raise ConfigurationError(f"config file {str(path)!r} not found: check the path, or "
                                     "run `accel config` to write one.")
    text = path.read_text()
    if is_deepspeed_json(path, text):
        return ConfigFile(path=path, kind="deepspeed_json", raw=json.loads(text),
                          values={"use_deepspeed": True, "deepspeed_config_file": str(path)})
    return _load_yaml_schema(path, _read_mapping(path, text))


def save_config(data: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """Write ``data`` as YAML (JSON for a ``.json`` path), creating the folder."""
    target = Path(path)
    return _write(data, target, "json" if target.suffix == ".json" else "yaml")


def _write(data: dict[str, Any], target: Path, fmt: str) -> Path:
    target.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "json":
        target.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    else:
        import yaml

        target.write_text(yaml.safe_dump(data, sort_keys=True))
    return target
