"""Fill a DeepSpeed config's ``"auto"`` values from what ``prepare`` sees; refuse conflicts.

Each ``"auto"`` has one documented source (docs/deepspeed.md): the micro batch size from
the prepared data loader, the accumulation steps from the Accelerator, the train batch size
from both and the number of data-parallel processes, ``bf16``/``fp16`` from the
Accelerator's mixed precision, bucket sizes from the model's hidden size, optimizer and
scheduler parameters from :class:`~accel_parallel.deepspeed.dummies.DummyOptim` /
``DummyScheduler``. A value that is set and differs from what accel sees is an error
naming both sources — never a silent winner. Pure functions: no DeepSpeed import.
"""

from __future__ import annotations

import copy
from typing import Any

from accel_state import ConfigurationError

from accel_parallel.deepspeed.json import AUTO, is_auto

__all__ = ["apply_precision", "fill_auto", "hidden_size_of", "zero_init_config",
           "remaining_auto"]

_PRECISIONS = ("no", "bf16", "fp16")


def _conflict(key: str, config_value: Any, source: str, value: Any) -> ConfigurationError:
    return ConfigurationError(
        f"DeepSpeed config conflict: the config says {key}={config_value!r} but {source} is "
        f"{value!r}. Make them agree, or set {key} to \"auto\" to take accel's value.")


def apply_precision(config: dict[str, Any], mixed_precision: str) -> None:
    """Set ``bf16.enabled`` / ``fp16.enabled`` from the Accelerator's mixed precision.

    ``"auto"`` (or absent) takes the Accelerator's; an explicit value that contradicts a
    precision the Accelerator asked for is a conflict. ``"no"`` leaves explicit values (a
    JSON that enables bf16 by itself trains in bf16)."""
    if mixed_precision not in _PRECISIONS:
        raise ConfigurationError(
            f"Accelerator(mixed_precision={mixed_precision!r}) is not supported with DeepSpeed; "
            "use 'no', 'bf16' or 'fp16' (DeepSpeed's fp8 paths are not wired into accel).")
    enabled: dict[str, Any] = {}
    for name in ("bf16", "fp16"):
        node = config.get(name)
        if node is not None and not isinstance(node, dict):
            raise ConfigurationError(f"DeepSpeed config {name}={node!r} must be an object such "
                                     f"as {{\"enabled\": true}}.")
        value = AUTO if node is None else node.get("enabled", False)  # DeepSpeed's default
        if mixed_precision != "no" and not is_auto(value) and bool(value) != (
                mixed_precision == name):
            raise _conflict(f"{name}.enabled", value, "the Accelerator's mixed_precision "
                            "(mixed_precision= or --mixed_precision)", mixed_precision)
        enabled[name] = (mixed_precision == name) if is_auto(value) else bool(value)
    if enabled["bf16"] and enabled["fp16"]:
        raise ConfigurationError("DeepSpeed config enables both bf16 and fp16: enable one.")
    for name, value in enabled.items():
        if name in config or value:
            config.setdefault(name, {})["enabled"] = value


def hidden_size_of(model: Any) -> int | None:
    """The hidden size a model declares (``config.hidden_size``, the largest of
    ``config.hidden_sizes``, or a ``hidden_size`` attribute), else None."""
    config = getattr(model, "config", None)
    for owner in (config, model):
        size = getattr(owner, "hidden_size", None) if owner is not None else None
        if isinstance(size, int) and not isinstance(size, bool):
            return size
    sizes = getattr(config, "hidden_sizes", None) if config is not None else None
    if isinstance(sizes, (list, tuple)) and sizes:
        return int(max(sizes))
    return None


def _fill(node: dict[str, Any], key: str, value: Any, source: str, path: str) -> None:
    """Fill an "auto" with ``value``; a set value that differs is a conflict."""
    present = node.get(key)
    if present is None or is_auto(present):
        node[key] = value
    elif present != value:
        raise _conflict(path, present, source, value)


def _fill_batch(config: dict[str, Any], micro_batch: int | None, dp_size: int,
                accumulation: int) -> None:
    _fill(config, "gradient_accumulation_steps", accumulation,
          "the Accelerator's gradient_accumulation_steps", "gradient_accumulation_steps")
    micro = config.get("train_micro_batch_size_per_gpu")
    if micro is None or is_auto(micro):
        if micro_batch is None:
            total = config.get("train_batch_size")
            if isinstance(total, int) and not is_auto(total):
                micro_batch = max(1, total // (accumulation * dp_size))
            else:
                raise ConfigurationError(
                    "DeepSpeed config train_micro_batch_size_per_gpu is \"auto\" but no data "
                    "loader was prepared: pass the training DataLoader to the same "
                    "accelerator.prepare() call as the model (or an earlier one), or set "
                    "train_micro_batch_size_per_gpu in the config.")
        config["train_micro_batch_size_per_gpu"] = micro_batch
    elif micro_batch is not None and micro != micro_batch:
        raise _conflict("train_micro_batch_size_per_gpu", micro,
                        "the prepared data loader's batch size per process", micro_batch)
    micro = config["train_micro_batch_size_per_gpu"]
    _fill(config, "train_batch_size", micro * accumulation * dp_size,
          f"micro batch {micro} x accumulation {accumulation} x {dp_size} data-parallel "
          "process(es)", "train_batch_size")


def _fill_buckets(zero: dict[str, Any], hidden: int | None) -> None:
    sizes = {"reduce_bucket_size": lambda h: h * h,
             "stage3_prefetch_bucket_size": lambda h: int(0.9 * h * h),
             "stage3_param_persistence_threshold": lambda h: 10 * h}
    for key, rule in sizes.items():
        if is_auto(zero.get(key)):
            if hidden is None:
                del zero[key]  # DeepSpeed's default: the model declares no hidden size
            else:
                zero[key] = rule(hidden)


def _fill_params(section: str, node: dict[str, Any], values: dict[str, Any]) -> None:
    params = node.setdefault("params", {})
    for key, value in list(params.items()):
        if not is_auto(value):
            continue
        if key not in values:
            raise ConfigurationError(
                f"DeepSpeed config {section}.params.{key} is \"auto\" but accel has no value for "
                f"it: pass {key}= to the Dummy{'Optim' if section == 'optimizer' else 'Scheduler'}"
                " or set it in the config.")
        params[key] = values[key]


def fill_auto(config: dict[str, Any], *, micro_batch: int | None, dp_size: int,
              accumulation: int, hidden_size: int | None = None,
              optimizer_params: dict[str, Any] | None = None,
              scheduler_params: dict[str, Any] | None = None) -> dict[str, Any]:
    """A copy of ``config`` with every ``"auto"`` filled (see the module docstring);
    ``optimizer_params`` / ``scheduler_params``: the DummyOptim's / DummyScheduler's."""
    config = copy.deepcopy(config)
    _fill_batch(config, micro_batch, dp_size, accumulation)
    if is_auto(config.get("gradient_clipping")):
        # no clipping asked for anywhere: none (DeepSpeed's own default would clip at 1.0)
        config["gradient_clipping"] = 0.0
    zero = config.get("zero_optimization")
    if isinstance(zero, dict):
        _fill_buckets(zero, hidden_size)
    if "optimizer" in config and optimizer_params is not None:
        _fill_params("optimizer", config["optimizer"], optimizer_params)
    if "scheduler" in config and scheduler_params is not None:
        values = dict(scheduler_params)
        lr = (optimizer_params or {}).get("lr")
        if lr is None:
            lr = config.get("optimizer", {}).get("params", {}).get("lr")
        if lr is not None:
            values.setdefault("warmup_max_lr", lr)
        values.setdefault("warmup_min_lr", 0.0)
        _fill_params("scheduler", config["scheduler"], values)
    left = remaining_auto(config)
    if left:
        raise ConfigurationError(
            f"DeepSpeed config values {', '.join(left)} are \"auto\" but accel has no source "
            "for them (docs/deepspeed.md lists what \"auto\" can fill); set them in the config.")
    return config


def remaining_auto(node: Any, prefix: str = "") -> list[str]:
    """Dotted keys whose value is still ``"auto"``."""
    found: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            path = f"{prefix}{key}"
            if is_auto(value):
                found.append(path)
            else:
                found += remaining_auto(value, path + ".")
    return found


def zero_init_config(config: dict[str, Any]) -> dict[str, Any]:
    """What ``deepspeed.zero.Init`` reads, without "auto" values: the ZeRO section, the
    precision and a placeholder batch size (it validates one)."""
    zero = {k: v for k, v in (config.get("zero_optimization") or {}).items() if not is_auto(v)}
    out: dict[str, Any] = {"zero_optimization": zero, "train_micro_batch_size_per_gpu": 1,
                           "gradient_accumulation_steps": 1}
    for name in ("bf16", "fp16"):
        enabled = (config.get(name) or {}).get("enabled", False)
        out[name] = {"enabled": False if enabled == AUTO else bool(enabled)}
    return out
