"""The names a user picks a precision with: ``PrecisionType`` and the kwargs handlers.

Handlers are keyword-only dataclasses validated on construction, so a bad value fails
where it is written rather than at the first training step. Field names and defaults
follow Accelerate's, so ``kwargs_handlers=[GradScalerKwargs(init_scale=1024)]`` keeps working.
"""

from __future__ import annotations

import enum
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from accel_state import ConfigurationError, KwargsHandler

__all__ = ["PrecisionType", "FP8BackendType", "AutocastKwargs", "GradScalerKwargs",
           "AORecipeKwargs", "TERecipeKwargs", "FP8RecipeKwargs"]


class PrecisionType(str, enum.Enum):
    """The built-in values of ``mixed_precision`` (Accelerate's names)."""

    NO = "no"
    FP8 = "fp8"
    FP16 = "fp16"
    BF16 = "bf16"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def list(cls) -> list[str]:
        return [member.value for member in cls]


class FP8BackendType(str, enum.Enum):
    """Which library runs fp8 matmuls: torchao (``AO``) or Transformer Engine (``TE``)."""

    NO = "NO"
    TE = "TE"
    MSAMP = "MSAMP"
    AO = "AO"

    def __str__(self) -> str:
        return self.value


def _positive(owner: str, name: str, value: Any, *, minimum: float = 0.0,
              strict: bool = True) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and (
        value > minimum if strict else value >= minimum)
    if not ok:
        bound = f"> {minimum}" if strict else f">= {minimum}"
        raise ConfigurationError(f"{owner}({name}={value!r}) must be a number {bound}.")


@dataclass(kw_only=True)
class AutocastKwargs(KwargsHandler):
    """Arguments for ``torch.autocast`` around prepared models and ``Accelerator.autocast()``."""

    enabled: bool = True
    """False turns autocast off (the precision's other hooks, e.g. loss scaling, stay)."""
    cache_enabled: bool | None = None
    """Whether autocast caches weight casts inside the region (None: torch's default)."""

    def __post_init__(self) -> None:
        if not isinstance(self.enabled, bool):
            raise ConfigurationError(
                f"AutocastKwargs(enabled={self.enabled!r}) must be True or False.")
        if self.cache_enabled is not None and not isinstance(self.cache_enabled, bool):
            raise ConfigurationError(
                f"AutocastKwargs(cache_enabled={self.cache_enabled!r}) must be True, False "
                "or None.")


@dataclass(kw_only=True)
class GradScalerKwargs(KwargsHandler):
    """Arguments for ``torch.amp.GradScaler`` (fp16 loss scaling)."""

    init_scale: float = 65536.0
    """Loss scale at the first step."""
    growth_factor: float = 2.0
    """Factor the scale grows by after ``growth_interval`` steps without inf/nan (> 1)."""
    backoff_factor: float = 0.5
    """Factor the scale shrinks by after a step with inf/nan gradients (between 0 and 1)."""
    growth_interval: int = 2000
    """Consecutive finite steps before the scale grows."""
    enabled: bool = True
    """False trains fp16 without loss scaling (small gradients may underflow to zero)."""

    def __post_init__(self) -> None:
        _positive("GradScalerKwargs", "init_scale", self.init_scale)
        _positive("GradScalerKwargs", "growth_factor", self.growth_factor, minimum=1.0)
        if not (isinstance(self.backoff_factor, (int, float)) and 0 < self.backoff_factor < 1):
            raise ConfigurationError(
                f"GradScalerKwargs(backoff_factor={self.backoff_factor!r}) must be between "
                "0 and 1.")
        if not isinstance(self.growth_interval, int) or isinstance(self.growth_interval, bool) \
                or self.growth_interval < 1:
            raise ConfigurationError(
                f"GradScalerKwargs(growth_interval={self.growth_interval!r}) must be an "
                "integer >= 1.")
        if not isinstance(self.enabled, bool):
            raise ConfigurationError(
                f"GradScalerKwargs(enabled={self.enabled!r}) must be True or False.")


@dataclass(kw_only=True)
class AORecipeKwargs(KwargsHandler):
    """fp8 training through torchao's ``convert_to_float8_training``."""

    config: Any = None
    """A ``torchao.float8.Float8LinearConfig``; None builds one from the two flags below."""
    module_filter_func: Callable[[Any, str], bool] | None = None
    """``(module, fqn) -> bool``: which Linear layers become fp8. None keeps the first and
    last Linear layers and those whose dimensions are not multiples of 16 in high precision."""
    pad_inner_dim: bool = False
    """Pad the inner dimension of fp8 matmuls to a multiple of 16 (when ``config`` is None)."""
    enable_fsdp_float8_all_gather: bool = False
    """All-gather FSDP2 weights in fp8 (when ``config`` is None)."""

    def __post_init__(self) -> None:
        if self.module_filter_func is not None and not callable(self.module_filter_func):
            raise ConfigurationError(
                f"AORecipeKwargs(module_filter_func={self.module_filter_func!r}) must be a "
                "callable (module, fqn) -> bool.")


_FP8_FORMATS = ("HYBRID", "E4M3", "E5M2")
_AMAX_ALGOS = ("max", "most_recent")


@dataclass(kw_only=True)
class TERecipeKwargs(KwargsHandler):
    """fp8 training through NVIDIA Transformer Engine (CUDA only): a ``DelayedScaling`` recipe."""

    use_autocast_during_eval: bool = False
    """Keep fp8 autocast in eval mode (off by default: metrics are usually better without)."""
    margin: int = 0
    """Margin of the scaling-factor computation."""
    interval: int = 1
    """Steps between scaling-factor updates (ignored by Transformer Engine 2.x)."""
    fp8_format: str = "HYBRID"
    """HYBRID (e4m3 forward, e5m2 backward), E4M3 or E5M2."""
    amax_history_len: int = 1024
    """Length of the amax history window."""
    amax_compute_algo: str = "most_recent"
    """How the amax is chosen from the history: ``max`` or ``most_recent``."""
    override_linear_precision: tuple[bool, bool, bool] = (False, False, False)
    """Run (fprop, dgrad, wgrad) of linear layers in high precision."""
    use_mxfp8_block_scaling: bool = False
    """Use MXFP8 block scaling (Blackwell GPUs) instead of delayed scaling."""

    def __post_init__(self) -> None:
        owner = type(self).__name__
        self.fp8_format = str(self.fp8_format).upper()
        if self.fp8_format not in _FP8_FORMATS:
            raise ConfigurationError(f"{owner}(fp8_format={self.fp8_format!r}) must be one of "
                                     f"{', '.join(_FP8_FORMATS)}.")
        if self.amax_compute_algo not in _AMAX_ALGOS:
            raise ConfigurationError(f"{owner}(amax_compute_algo={self.amax_compute_algo!r}) must "
                                     f"be one of {', '.join(_AMAX_ALGOS)}.")
        _positive(owner, "margin", self.margin, strict=False)
        _positive(owner, "interval", self.interval, minimum=1, strict=False)
        _positive(owner, "amax_history_len", self.amax_history_len, minimum=1, strict=False)
        override = tuple(self.override_linear_precision)
        if len(override) != 3 or not all(isinstance(v, bool) for v in override):
            raise ConfigurationError(
                f"{owner}(override_linear_precision={self.override_linear_precision!r}) must be "
                "three booleans (fprop, dgrad, wgrad).")
        self.override_linear_precision = override  # type: ignore[assignment]


@dataclass(kw_only=True)
class FP8RecipeKwargs(TERecipeKwargs):
    """Deprecated: Accelerate's old catch-all fp8 handler; use ``TERecipeKwargs``
    (Transformer Engine) or ``AORecipeKwargs`` (torchao)."""

    backend: str = "TE"
    """Only ``TE`` is supported (MS-AMP is not)."""
    opt_level: str | None = None
    """MS-AMP's optimisation level; not supported."""

    def __post_init__(self) -> None:
        warnings.warn("FP8RecipeKwargs is deprecated; use TERecipeKwargs (Transformer Engine) or "
                      "AORecipeKwargs (torchao) instead.", FutureWarning, stacklevel=3)
        self.backend = str(self.backend).upper()
        if self.backend != "TE":
            raise ConfigurationError(
                f"FP8RecipeKwargs(backend={self.backend!r}) is not supported: accel runs fp8 "
                "through Transformer Engine (TERecipeKwargs) or torchao (AORecipeKwargs).")
        if self.opt_level is not None:
            raise ConfigurationError(
                f"FP8RecipeKwargs(opt_level={self.opt_level!r}) is an MS-AMP option, which accel "
                "does not support; drop it.")
        super().__post_init__()

    def to_te(self) -> TERecipeKwargs:
        """The same recipe as the non-deprecated handler."""
        names = [f for f in TERecipeKwargs.__dataclass_fields__]
        return TERecipeKwargs(**{name: getattr(self, name) for name in names})
