"""Accelerate's ``FullyShardedDataParallelPlugin``, resolved for FSDP2 (``fully_shard``).

Accelerate's names and spellings (FSDP1 strategies, digits from config files, torch enums,
``FSDP_*`` env vars for fields left None) become plain settings for the FSDP2 strategy;
fsdp_version=1 runs as FSDP2, FSDP1-only options FSDP2 cannot honour are errors (DESIGN §8).
"""

from __future__ import annotations

import inspect
import re
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import torch
from accel_state import ConfigurationError
from accel_state import env as _env
from accel_state.env import EnvVar, str_to_bool

from accel_parallel.fsdp.torch_fsdp import fsdp1, fsdp2

__all__ = ["FullyShardedDataParallelPlugin", "FSDP_SHARDING_STRATEGY", "FSDP_AUTO_WRAP_POLICY",
           "FSDP_STATE_DICT_TYPE", "FSDP2_STATE_DICT_TYPE", "FSDP_BACKWARD_PREFETCH"]

FSDP_SHARDING_STRATEGY = ["FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD",
                          "HYBRID_SHARD_ZERO2"]
FSDP_AUTO_WRAP_POLICY = ["TRANSFORMER_BASED_WRAP", "SIZE_BASED_WRAP", "NO_WRAP"]
FSDP_BACKWARD_PREFETCH = ["BACKWARD_PRE", "BACKWARD_POST", "NO_PREFETCH"]
FSDP_STATE_DICT_TYPE = ["FULL_STATE_DICT", "LOCAL_STATE_DICT", "SHARDED_STATE_DICT"]
FSDP2_STATE_DICT_TYPE = ["SHARDED_STATE_DICT", "FULL_STATE_DICT"]

_RESHARD = {"FULL_SHARD": True, "SHARD_GRAD_OP": False, "NO_SHARD": False,
            "HYBRID_SHARD": True, "HYBRID_SHARD_ZERO2": False}
_DTYPES = {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp16": torch.float16,
           "float16": torch.float16, "fp32": torch.float32, "float32": torch.float32}
_MP_KEYS = ("param_dtype", "reduce_dtype", "output_dtype", "cast_forward_inputs")
_BOOL_WORDS = ("1", "0", "true", "false", "yes", "no", "y", "n", "t", "f", "on", "off")
_fsdp1_notice_shown = False


def _bad(what: str, value: Any, valid: Iterable[Any], fix: str) -> ConfigurationError:
    return ConfigurationError(f"{what}={value!r} is not valid; use one of "
                              f"{', '.join(map(str, valid))}. {fix}")


def _strategy_name(value: Any, what: str) -> str | None:
    """FSDP1 strategy spelling (name, 1..5, "1".."5", ShardingStrategy) -> name, else None."""
    if isinstance(value, bool) or not isinstance(value, (int, str, fsdp1().ShardingStrategy)):
        return None
    if isinstance(value, int) and not 1 <= value <= 5:
        raise _bad(what, value, [*FSDP_SHARDING_STRATEGY, "1..5"], "FULL_SHARD (1) is default.")
    text = str(value if isinstance(value, (int, str)) else value.name).strip().upper().lstrip("_")
    if text.isdigit():
        return FSDP_SHARDING_STRATEGY[int(text) - 1] if 1 <= int(text) <= 5 else None
    return text if text in _RESHARD else None


def _flag(value: Any, var: EnvVar, name: str, default: bool) -> bool:
    """An explicit bool (or yes/no string) wins; else the environment; else ``default``."""
    if value is None:
        return var.get_bool(default)
    if isinstance(value, bool) or (isinstance(value, str) and value.strip().lower() in _BOOL_WORDS):
        return value if isinstance(value, bool) else bool(str_to_bool(value))
    raise ConfigurationError(f"{name}={value!r} is not a boolean: pass True or False.")


def _dtype(value: Any, key: str) -> torch.dtype | None:
    name = value.strip().lower() if isinstance(value, str) else None
    if value is None or isinstance(value, torch.dtype) or name in _DTYPES:
        return _DTYPES[name] if name else value
    raise _bad(f"mixed_precision_policy[{key!r}]", value, [*_DTYPES, "a torch.dtype", "None"],
               "Pass e.g. {'param_dtype': 'bf16', 'reduce_dtype': 'fp32'}.")


@dataclass(kw_only=True)
class FullyShardedDataParallelPlugin:
    """FSDP settings (Accelerate's names and spellings), resolved for ``fully_shard``."""

    fsdp_version: int | None = None
    """1 or 2 (env FSDP_VERSION, default 2); 1 is run as FSDP2 after a one-time notice."""
    sharding_strategy: Any = None
    """FSDP1 name, 1..5, "1".."5" or ShardingStrategy (env FSDP_SHARDING_STRATEGY) -> enum."""
    reshard_after_forward: Any = None
    """bool, or a strategy spelling (env FSDP_RESHARD_AFTER_FORWARD) -> bool."""
    backward_prefetch: Any = None
    """FSDP1: None, BACKWARD_PRE or NO_PREFETCH (env FSDP_BACKWARD_PREFETCH) -> str or None."""
    mixed_precision_policy: Any = None
    """MixedPrecisionPolicy, FSDP1 MixedPrecision or dict of the policy's fields -> policy."""
    auto_wrap_policy: Any = None
    """TRANSFORMER_BASED_WRAP, SIZE_BASED_WRAP, NO_WRAP (env FSDP_AUTO_WRAP_POLICY) or callable."""
    cpu_offload: Any = None
    """bool, CPUOffload or OffloadPolicy (env FSDP_OFFLOAD_PARAMS, default False) -> bool."""
    ignored_modules: Any = None
    """Modules FSDP leaves alone: an iterable of modules or a regex fullmatching their names."""
    state_dict_type: Any = None
    """SHARDED_STATE_DICT (default) or FULL_STATE_DICT (env FSDP_STATE_DICT_TYPE) -> enum."""
    state_dict_config: Any = None
    """FSDP1 StateDictConfig (offload_to_cpu, rank0_only); filled to match state_dict_type."""
    optim_state_dict_config: Any = None
    """FSDP1 OptimStateDictConfig; filled to match state_dict_type."""
    limit_all_gathers: bool = True
    """FSDP1 only: FSDP2 always limits in-flight all-gathers, so False is an error."""
    use_orig_params: bool | None = None
    """FSDP1 only (env FSDP_USE_ORIG_PARAMS): FSDP2 keeps original params; False is an error."""
    param_init_fn: Callable[..., Any] | None = None
    """FSDP1 only: no FSDP2 equivalent, a function is an error (use the meta device)."""
    sync_module_states: bool | None = None
    """Broadcast rank 0's weights (env FSDP_SYNC_MODULE_STATES, default True; see below)."""
    forward_prefetch: bool | None = None
    """FSDP1 only (env FSDP_FORWARD_PREFETCH): True has no FSDP2 equivalent and is an error."""
    activation_checkpointing: bool | None = None
    """Recompute activations in backward (env FSDP_ACTIVATION_CHECKPOINTING, default False)."""
    cpu_ram_efficient_loading: bool | None = None
    """Load weights on rank 0 only (env FSDP_CPU_RAM_EFFICIENT_LOADING); forces sync_module_states
    to True."""
    transformer_cls_names_to_wrap: Any = None
    """Class names (list or "A,B"; env FSDP_TRANSFORMER_CLS_TO_WRAP); default _no_split_modules."""
    min_num_params: int | None = None
    """SIZE_BASED_WRAP threshold (env FSDP_MIN_NUM_PARAMS, default 1e8)."""
    sharding: str = field(init=False, default="FULL_SHARD")
    """Resolved strategy name, one of FSDP_SHARDING_STRATEGY."""
    hybrid: bool = field(init=False, default=False)
    """HYBRID_SHARD(_ZERO2): shard within a node, replicate across nodes (2-D mesh)."""
    replicate_only: bool = field(init=False, default=False)
    """NO_SHARD: replicate only (shard dimension of size 1)."""

    def __post_init__(self) -> None:
        self._resolve_version()
        self._resolve_sharding()
        self._check_fsdp1_options()
        self.auto_wrap_policy = self._parse_wrap_policy(self.auto_wrap_policy)
        names = self.transformer_cls_names_to_wrap
        names = _env.FSDP_TRANSFORMER_CLS_TO_WRAP.get() if names is None else names
        names = [names] if isinstance(names, type) else names
        names = names.split(",") if isinstance(names, str) else names or ()
        names = [n.strip() if isinstance(n, str) else n.__name__ for n in names]
        self.transformer_cls_names_to_wrap = [n for n in names if n] or None
        self._resolve_min_num_params()
        self.set_cpu_offload(self.cpu_offload)
        for name in ("activation_checkpointing", "cpu_ram_efficient_loading"):
            var = getattr(_env, "FSDP_" + name.upper())
            setattr(self, name, _flag(getattr(self, name), var, name, False))
        self.sync_module_states = self.cpu_ram_efficient_loading or _flag(
            self.sync_module_states, _env.FSDP_SYNC_MODULE_STATES, "sync_module_states", True)
        self.set_state_dict_type(self.state_dict_type)
        self.validate_mixed_precision_policy()
        try:
            re.compile(self.ignored_modules) if isinstance(self.ignored_modules, str) else None
        except re.error as exc:
            raise _bad("ignored_modules", self.ignored_modules, ("a valid regex", "modules"),
                       f"Fix the pattern ({exc}).") from None
        if self.ignored_modules is not None and not isinstance(self.ignored_modules, str):
            self.ignored_modules = list(self.ignored_modules)

    def _resolve_version(self) -> None:
        global _fsdp1_notice_shown
        version = _env.FSDP_VERSION.get("2") if self.fsdp_version is None else self.fsdp_version
        if str(version).strip() not in ("1", "2"):
            raise _bad("fsdp_version", version, (1, 2), "accel runs FSDP2; 2 is the default.")
        self.fsdp_version = int(str(version).strip())
        if self.fsdp_version == 1 and not _fsdp1_notice_shown:
            _fsdp1_notice_shown = True
            warnings.warn("fsdp_version=1 is run as FSDP2 (torch.distributed.fsdp.fully_shard) "
                          "with the equivalent settings; set fsdp_version=2 to silence this.",
                          UserWarning, stacklevel=4)

    def _resolve_sharding(self) -> None:
        strategy_value, reshard_value = self.sharding_strategy, self.reshard_after_forward
        names = ("sharding_strategy", "reshard_after_forward")
        if (strategy_value, reshard_value) == (None, None):  # arguments win over the env
            env = (_env.FSDP_SHARDING_STRATEGY, _env.FSDP_RESHARD_AFTER_FORWARD)
            strategy_value, reshard_value = (var.get() for var in env)
            names = tuple(f"{var.name} (env)" for var in env)
        strategy = None
        if strategy_value is not None:
            strategy = _strategy_name(strategy_value, names[0])
            if strategy is None:
                raise _bad(names[0], strategy_value, FSDP_SHARDING_STRATEGY,
                           "Or give reshard_after_forward=True/False.")
        reshard = implied = None
        if reshard_value is not None:
            implied = _strategy_name(reshard_value, names[1])
            if implied is None and not isinstance(reshard_value, bool):
                if str(reshard_value).strip().lower() not in _BOOL_WORDS:
                    raise _bad(names[1], reshard_value, ["True", "False", *FSDP_SHARDING_STRATEGY],
                               "FSDP2 takes a bool: True frees parameters after forward.")
                reshard_value = bool(str_to_bool(reshard_value))
            reshard = reshard_value if implied is None else None
        if strategy and ((implied or strategy) != strategy or (
                strategy != "NO_SHARD" and reshard not in (None, _RESHARD[strategy]))):
            raise ConfigurationError(
                f"{names[0]}={strategy_value!r} and {names[1]}={reshard_value!r} disagree "
                f"({strategy} means reshard_after_forward={_RESHARD[strategy]}); give only one.")
        strategy = strategy or implied
        strategy = strategy or ("SHARD_GRAD_OP" if reshard is False else "FULL_SHARD")
        self.sharding, code = strategy, FSDP_SHARDING_STRATEGY.index(strategy) + 1
        self.sharding_strategy = fsdp1().ShardingStrategy(code)
        self.reshard_after_forward = _RESHARD[strategy] if reshard is None else reshard
        self.hybrid = strategy.startswith("HYBRID")
        self.replicate_only = strategy == "NO_SHARD"

    def _check_fsdp1_options(self) -> None:
        fix = "FSDP2 (fully_shard) has no equivalent; remove it or use the default."
        for name, ok in (("use_orig_params", True), ("forward_prefetch", False)):
            var = getattr(_env, "FSDP_" + name.upper())
            setattr(self, name, _flag(getattr(self, name), var, name, ok))
        for name, ok in (("use_orig_params", True), ("forward_prefetch", False),
                         ("limit_all_gathers", True), ("param_init_fn", None)):
            if getattr(self, name) is not ok:
                raise ConfigurationError(f"{name}={getattr(self, name)!r} (FSDP1 option): {fix}")
        prefetch = self.backward_prefetch
        prefetch = _env.FSDP_BACKWARD_PREFETCH.get() if prefetch is None else prefetch
        if prefetch is not None:
            name = prefetch.name if hasattr(prefetch, "name") else str(prefetch).strip().upper()
            if name not in ("BACKWARD_PRE", "NO_PREFETCH"):
                raise _bad("backward_prefetch", prefetch, ("BACKWARD_PRE", "NO_PREFETCH"),
                           f"BACKWARD_PRE is what FSDP2 does; for BACKWARD_POST {fix}")
            prefetch = name
        self.backward_prefetch = prefetch

    @staticmethod
    def _parse_wrap_policy(policy: Any) -> Any:
        policy = _env.FSDP_AUTO_WRAP_POLICY.get("NO_WRAP") if policy is None else policy
        if callable(policy):
            return policy
        text = str(policy).strip().upper().replace("_AUTO_WRAP", "_BASED_WRAP")
        if text not in FSDP_AUTO_WRAP_POLICY:
            raise _bad("auto_wrap_policy", policy, [*FSDP_AUTO_WRAP_POLICY, "a callable"],
                       "NO_WRAP shards the whole model as one unit.")
        return text

    def _resolve_min_num_params(self) -> None:
        value = self.min_num_params
        value = _env.FSDP_MIN_NUM_PARAMS.get_int(100_000_000) if value is None else value
        try:
            number = -1 if isinstance(value, bool) else int(float(value))
        except (TypeError, ValueError):
            number = -1
        if number < 0:
            raise ConfigurationError(f"min_num_params={value!r} is not a parameter count: "
                                     "pass a non-negative integer such as 100_000_000.")
        self.min_num_params = number

    def set_state_dict_type(self, state_dict_type: Any = None) -> None:
        """Resolve ``state_dict_type`` (None: env, else SHARDED_STATE_DICT) and its configs."""
        fsdp, value = fsdp1(), state_dict_type
        value = _env.FSDP_STATE_DICT_TYPE.get("SHARDED_STATE_DICT") if value is None else value
        name = value.name if isinstance(value, fsdp.StateDictType) else str(value).strip().upper()
        if name.isdigit() and 1 <= int(name) <= 3:
            name = fsdp.StateDictType(int(name)).name
        if name in ("FULL", "SHARDED", "LOCAL"):
            name += "_STATE_DICT"
        if name == "LOCAL_STATE_DICT":
            raise ConfigurationError("state_dict_type='LOCAL_STATE_DICT' does not exist in FSDP2; "
                                     "use SHARDED_STATE_DICT (default) or FULL_STATE_DICT.")
        if name not in FSDP2_STATE_DICT_TYPE:
            raise _bad("state_dict_type", value, FSDP2_STATE_DICT_TYPE,
                       "SHARDED_STATE_DICT is the default.")
        self.state_dict_type = fsdp.StateDictType[name]
        full = name == "FULL_STATE_DICT"  # configs of the other kind are replaced, given kept
        kind = "Full" if full else "Sharded"
        model_cfg = getattr(fsdp, f"{kind}StateDictConfig")
        optim_cfg = getattr(fsdp, f"{kind}OptimStateDictConfig")
        extra = {"rank0_only": True} if full else {}
        if not isinstance(self.state_dict_config, model_cfg):
            self.state_dict_config = model_cfg(offload_to_cpu=True, **extra)
        if not isinstance(self.optim_state_dict_config, optim_cfg):
            self.optim_state_dict_config = optim_cfg(offload_to_cpu=True, **extra)

    def set_cpu_offload(self, cpu_offload: Any = None) -> None:
        """Resolve ``cpu_offload`` to a bool (None: env FSDP_OFFLOAD_PARAMS, else False)."""
        if isinstance(cpu_offload, fsdp1().CPUOffload):
            cpu_offload = cpu_offload.offload_params
        elif isinstance(cpu_offload, fsdp2().OffloadPolicy):
            cpu_offload = isinstance(cpu_offload, fsdp2().CPUOffloadPolicy)
        self.cpu_offload = _flag(cpu_offload, _env.FSDP_OFFLOAD_PARAMS, "cpu_offload", False)

    def validate_cpu_offload(self, device: torch.device | str) -> None:
        """CPU offload moves shards off an accelerator; on a CPU-only run it is an error."""
        if torch.device(device).type == "cpu" and self.cpu_offload:
            raise ConfigurationError("cpu_offload=True (FSDP_OFFLOAD_PARAMS) needs an accelerator: "
                                     "torch's CPUOffloadPolicy offloads from GPU memory, but this "
                                     "run's device is the CPU. Set cpu_offload=False or use GPUs.")

    def set_mixed_precision(self, mixed_precision: str, buffer_autocast: bool = False,
                            override: bool = False) -> None:
        """Fill the policy from fp16/bf16 unless given (or ``override``); buffer_autocast: no-op."""
        mode = str(mixed_precision).strip().lower()
        if mode not in ("no", "fp16", "bf16", "fp8"):
            raise _bad("mixed_precision", mixed_precision, ("no", "fp16", "bf16", "fp8"),
                       "Pass the Accelerator's mixed_precision.")
        if mode in ("fp16", "bf16") and (self.mixed_precision_policy is None or override):
            self.mixed_precision_policy = {"param_dtype": mode, "reduce_dtype": mode}
            self.validate_mixed_precision_policy()

    def validate_mixed_precision_policy(self) -> None:
        """Normalise ``mixed_precision_policy`` to a MixedPrecisionPolicy (or None)."""
        policy = self.mixed_precision_policy
        if policy is None or isinstance(policy, fsdp2().MixedPrecisionPolicy):
            return
        if isinstance(policy, fsdp1().MixedPrecision):  # FSDP1: buffer_dtype has no FSDP2 meaning
            if policy.keep_low_precision_grads:
                raise ConfigurationError("MixedPrecision(keep_low_precision_grads=True) has no "
                                         "FSDP2 equivalent; remove it.")
            policy = {"param_dtype": policy.param_dtype, "reduce_dtype": policy.reduce_dtype,
                      "cast_forward_inputs": policy.cast_forward_inputs}
        if not isinstance(policy, dict):
            raise ConfigurationError(
                f"mixed_precision_policy={policy!r} is not valid; pass None, a "
                "torch.distributed.fsdp.MixedPrecisionPolicy or a dict of its fields.")
        unknown = sorted(set(policy) - set(_MP_KEYS) - {"buffer_dtype"})
        if unknown:
            raise _bad("mixed_precision_policy key", unknown[0], _MP_KEYS,
                       "These are MixedPrecisionPolicy's fields.")
        kwargs: dict[str, Any] = {k: _dtype(v, k) for k, v in policy.items() if k in _MP_KEYS[:3]}
        if "cast_forward_inputs" in policy:
            kwargs["cast_forward_inputs"] = bool(policy["cast_forward_inputs"])
        self.mixed_precision_policy = fsdp2().MixedPrecisionPolicy(**kwargs)

    def set_auto_wrap_policy(self, model: torch.nn.Module) -> list[torch.nn.Module]:
        return self.modules_to_shard(model)  # Accelerate's name: checks the policy on ``model``

    def ignored_params(self, model: torch.nn.Module) -> set[torch.nn.Parameter]:
        """Parameters of ``ignored_modules`` (fully_shard's ``ignored_params``)."""
        return {p for m in self._ignored(model) for p in m.parameters()}

    def _ignored(self, model: torch.nn.Module) -> list[torch.nn.Module]:
        if isinstance(self.ignored_modules, str):
            return [m for n, m in model.named_modules() if re.fullmatch(self.ignored_modules, n)]
        return list(self.ignored_modules or ())

    def modules_to_shard(self, model: torch.nn.Module) -> list[torch.nn.Module]:
        """Submodules to ``fully_shard`` on their own, children before parents (never the root)."""
        policy = self.auto_wrap_policy
        if policy in (None, "NO_WRAP"):
            return []
        ignored = {id(m) for m in self._ignored(model)}
        order = [m for m in reversed(list(model.modules())) if m is not model]
        if policy == "SIZE_BASED_WRAP":
            return self._size_based(model, ignored)
        if policy == "TRANSFORMER_BASED_WRAP":
            names = self._wrap_class_names(model)
            chosen = [m for m in order if type(m).__name__ in names]
        else:
            chosen = [m for m in order if _call_policy(policy, m)]
        return [m for m in chosen if id(m) not in ignored]

    def _wrap_class_names(self, model: torch.nn.Module) -> set[str]:
        present = {type(m).__name__ for m in model.modules()}
        if self.transformer_cls_names_to_wrap:
            missing = [n for n in self.transformer_cls_names_to_wrap if n not in present]
            if missing:
                raise ConfigurationError(
                    f"transformer_cls_names_to_wrap names {missing[0]!r}, which is no module "
                    f"class of this model; its classes are: {', '.join(sorted(present))}.")
            return set(self.transformer_cls_names_to_wrap)
        names = {n for m in model.modules() for n in (getattr(m, "_no_split_modules", None) or ())}
        if not names & present:
            raise ConfigurationError(
                "auto_wrap_policy='TRANSFORMER_BASED_WRAP' needs class names: pass transformer_cls_"
                "names_to_wrap=[...] (env FSDP_TRANSFORMER_CLS_TO_WRAP) or give the model a "
                f"_no_split_modules list (found {sorted(names)}, matching no class of the model).")
        return names & present

    def _size_based(self, model: torch.nn.Module, ignored: set[int]) -> list[torch.nn.Module]:
        """FSDP1's rule: bottom-up, a module whose not-yet-sharded parameters reach the bar."""
        chosen: list[torch.nn.Module] = []

        def visit(module: torch.nn.Module) -> int:  # returns its unsharded parameter count
            if id(module) in ignored:
                return 0
            rest = sum(visit(child) for child in module.children())
            rest += sum(p.numel() for p in module.parameters(recurse=False))
            if module is not model and rest >= self.min_num_params:
                chosen.append(module)
                return 0
            return rest

        visit(model)
        return chosen


def _call_policy(policy: Callable[..., Any], module: torch.nn.Module) -> bool:
    """A ``(module) -> bool`` callable, or one of torch's FSDP1 auto-wrap policy functions."""
    try:
        fsdp1_style = {"recurse", "nonwrapped_numel"} <= set(inspect.signature(policy).parameters)
    except (TypeError, ValueError):
        fsdp1_style = False
    if fsdp1_style:
        numel = sum(p.numel() for p in module.parameters())
        return bool(policy(module=module, recurse=False, nonwrapped_numel=numel))
    return bool(policy(module))
