"""Accelerate's lower-level launch helpers: ``_filter_args``, ``setup_fp8_env`` and
``PrepareForLaunch``, for code that builds launches itself instead of `accel launch`.

Environment variables are written through their declared :mod:`accel_state.env` entries
(canonical ``ACCEL_*`` names, which every reader also accepts as ``ACCELERATE_*``).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any

from accel_state import env
from accel_state.enums import DistributedType
from accel_state.errors import ConfigurationError

__all__ = ["PrepareForLaunch", "_filter_args", "setup_fp8_env", "test_launch"]

#: fp8 launch arguments -> the variable each is written to
_FP8_VARS = {
    "fp8_backend": env.FP8_BACKEND,
    "fp8_use_autocast_during_eval": env.FP8_USE_AUTOCAST_DURING_EVAL,
    "fp8_margin": env.FP8_MARGIN, "fp8_interval": env.FP8_INTERVAL, "fp8_format": env.FP8_FORMAT,
    "fp8_amax_history_len": env.FP8_AMAX_HISTORY_LEN,
    "fp8_amax_compute_algo": env.FP8_AMAX_COMPUTE_ALGO, "fp8_opt_level": env.FP8_OPT_LEVEL,
    "fp8_enable_fsdp_float8_all_gather": env.FP8_ENABLE_FSDP_FLOAT8_ALL_GATHER,
    "fp8_pad_inner_dim": env.FP8_PAD_INNER_DIM,
}
_OVERRIDES = (env.FP8_OVERRIDE_FPROP, env.FP8_OVERRIDE_DGRAD, env.FP8_OVERRIDE_WGRAD)


def _filter_args(args: argparse.Namespace, parser: argparse.ArgumentParser,
                 default_args: Sequence[str] = ()) -> argparse.Namespace:
    """``parser``'s namespace (its defaults, parsed from ``default_args``) with the values
    ``args`` has for the options ``parser`` knows; ``args``' other attributes are dropped."""
    filtered, _ = parser.parse_known_args(list(default_args))
    known = vars(filtered)
    for key, value in vars(args).items():
        if key in known:
            setattr(filtered, key, value)
    return filtered


def setup_fp8_env(args: argparse.Namespace, current_env: dict[str, str]) -> dict[str, str]:
    """Write every set ``fp8_*`` launch argument of ``args`` into ``current_env`` (and
    return it); ``fp8_override_linear_precision`` is three booleans (fprop, dgrad, wgrad)."""
    for name, value in vars(args).items():
        if not name.startswith("fp8_") or value is None:
            continue
        if name == "fp8_override_linear_precision":
            if isinstance(value, str) or len(value) != 3:
                raise ConfigurationError(f"fp8_override_linear_precision={value!r} must be three "
                                         "booleans (fprop, dgrad, wgrad).")
            for var, flag in zip(_OVERRIDES, value, strict=True):
                var.set(flag, env=current_env)
        elif name in _FP8_VARS:
            _FP8_VARS[name].set(value, env=current_env)
        else:
            known = sorted([*_FP8_VARS, "fp8_override_linear_precision"])
            raise ConfigurationError(f"Unknown fp8 launch argument {name}={value!r}: the known "
                                     f"ones are {known}.")
    return current_env


class PrepareForLaunch:
    """The per-process entry of a forked launch: ``PrepareForLaunch(fn, distributed_type)(index,
    *args)`` sets this worker's ``LOCAL_RANK`` / ``RANK`` (or, with ``debug``, joins the
    debug launcher's gloo group through its FileStore) and marks it fork-launched, then
    calls ``fn(*args)``."""

    def __init__(self, launcher: Callable[..., Any], distributed_type: str = "NO",
                 debug: bool = False) -> None:
        if not callable(launcher):
            raise ConfigurationError(f"PrepareForLaunch(launcher={launcher!r}) must be callable.")
        name = str(getattr(distributed_type, "value", distributed_type))  # str(member): "X.NO"
        if name not in DistributedType:
            raise ConfigurationError(f"PrepareForLaunch(distributed_type={distributed_type!r}) "
                                     f"must be one of {DistributedType.list()}.")
        self.launcher = launcher
        self.distributed_type = DistributedType(name)
        self.debug = debug

    def __call__(self, index: int, *args: Any) -> Any:
        if self.debug:
            self._join_debug_group(index)
        elif self.distributed_type is not DistributedType.NO:
            nproc = env.LOCAL_WORLD_SIZE.get_int(1) or 1
            node_rank = env.NODE_RANK.get_int(0) or 0
            env.LOCAL_RANK.set(index)
            env.RANK.set(nproc * node_rank + index)
        env.FORK_LAUNCHED.set(1)
        return self.launcher(*args)

    @staticmethod
    def _join_debug_group(index: int) -> None:
        import torch.distributed as dist

        world_size, rdv_file = env.WORLD_SIZE.get_int(), env.DEBUG_RDV_FILE.get()
        if world_size is None or not rdv_file:
            raise ConfigurationError(
                "PrepareForLaunch(debug=True) runs under debug_launcher, which sets WORLD_SIZE "
                "and ACCEL_DEBUG_RDV_FILE; set both to join its process group.")
        store = dist.FileStore(rdv_file, world_size)
        dist.init_process_group("gloo", rank=index, world_size=world_size, store=store)


def test_launch() -> None:
    """Sanity check for a launched worker: build the process state (which joins the
    process group a launcher set up) and raise if that fails."""
    from accel_state import PartialState

    PartialState()
