"""bf16 and fp16 mixed precision with ``torch.autocast`` (and ``torch.amp.GradScaler`` for fp16).

Master weights and gradients stay fp32; matmuls run in the low dtype inside autocast.
A device that cannot autocast to the requested dtype is an error at construction,
never a silent fall-back to fp32.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from accel_state import ConfigurationError

from accel_precision.base import Precision
from accel_precision.kwargs import AutocastKwargs, GradScalerKwargs

if TYPE_CHECKING:
    from accel_precision.kwargs import AORecipeKwargs, TERecipeKwargs

__all__ = ["AutocastPrecision", "BF16Precision", "FP16Precision", "check_autocast",
           "make_grad_scaler", "step_with_scaler"]

_DTYPE_NAMES = {torch.float16: "fp16", torch.bfloat16: "bf16"}


def _autocast_works(device_type: str, dtype: torch.dtype) -> bool:
    """Enter ``torch.autocast`` once and see whether it really turned on with ``dtype``."""
    is_available = getattr(torch.amp, "is_autocast_available", None)
    if is_available is not None and not is_available(device_type):
        return False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns, then disables, for unsupported dtypes
        try:
            with torch.autocast(device_type, dtype=dtype):
                if not torch.is_autocast_enabled(device_type):
                    return False
                get_dtype = getattr(torch, "get_autocast_dtype", None)
                return get_dtype is None or get_dtype(device_type) == dtype
        except (RuntimeError, ValueError, TypeError):
            return False


def check_autocast(device: torch.device, dtype: torch.dtype) -> None:
    """Raise a ConfigurationError when ``device`` cannot run ``dtype`` autocast."""
    name = _DTYPE_NAMES.get(dtype, str(dtype))
    if device.type == "cuda" and dtype is torch.bfloat16 and not torch.cuda.is_bf16_supported():
        raise ConfigurationError(
            f"mixed_precision={name!r} needs a GPU with bf16 support (Ampere or newer); this "
            f"{torch.cuda.get_device_name(device)} has none. Use mixed_precision='fp16' instead.")
    if not _autocast_works(device.type, dtype):
        raise ConfigurationError(
            f"mixed_precision={name!r} cannot run on device {device.type!r}: this torch "
            f"{torch.__version__} has no {name} autocast there, and training would silently stay "
            "fp32. Pick another mixed_precision ('bf16' runs on CPU) or run on a GPU.")


def make_grad_scaler(device: torch.device, kwargs: GradScalerKwargs | None = None
                     ) -> torch.amp.GradScaler:
    """A ``torch.amp.GradScaler`` for ``device``; an error where this torch has none for it."""
    options = (kwargs or GradScalerKwargs()).to_kwargs()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            scaler = torch.amp.GradScaler(device.type, **options)
    except (RuntimeError, ValueError, TypeError, AttributeError) as error:
        scaler, reason = None, str(error)
    else:
        reason = "it came up disabled"
    if scaler is None or (options.get("enabled", True) and not scaler.is_enabled()):
        raise ConfigurationError(
            f"mixed_precision='fp16' needs loss scaling, but torch {torch.__version__} has no "
            f"GradScaler for device {device.type!r} ({reason}). Use mixed_precision='bf16', or "
            "pass GradScalerKwargs(enabled=False) to train fp16 without loss scaling.")
    return scaler


def step_with_scaler(scaler: torch.amp.GradScaler, optimizer: torch.optim.Optimizer,
                     closure: Callable[[], Any] | None = None) -> bool:
    """``scaler.step(optimizer)``; return whether the optimizer really stepped (no inf/nan).

    ``GradScaler.step`` does not say whether it skipped, so the optimizer's ``step`` is
    observed for the duration of the call (and put back exactly as it was).
    """
    stepped = False
    inner = optimizer.step
    own = vars(optimizer)
    had_own, saved = "step" in own, own.get("step")

    def observed_step(*args: Any, **kwargs: Any) -> Any:
        nonlocal stepped
        stepped = True
        return inner(*args, **kwargs)

    optimizer.step = observed_step  # type: ignore[method-assign]
    try:
        if closure is None:
            scaler.step(optimizer)
        else:
            scaler.step(optimizer, closure)
    finally:
        if had_own:
            own["step"] = saved
        else:
            del own["step"]
    return stepped


class AutocastPrecision(Precision):
    """Forward under ``torch.autocast(dtype=...)``; parameters and gradients stay fp32."""

    dtype: torch.dtype = torch.bfloat16

    def __init__(self, *, device: torch.device | str | None = None,
                 autocast_kwargs: AutocastKwargs | None = None) -> None:
        super().__init__(device=device, autocast_kwargs=autocast_kwargs)
        check_autocast(self.device, self.dtype)

    @property
    def autocast_dtype(self) -> torch.dtype:
        return self.dtype

    @property
    def param_dtype(self) -> torch.dtype:
        return self.dtype

    @property
    def reduce_dtype(self) -> torch.dtype:
        return torch.float32

    def forward_context(self, autocast_kwargs: AutocastKwargs | None = None
                        ) -> contextlib.AbstractContextManager[Any]:
        arguments = self._autocast_arguments(autocast_kwargs or self.autocast_kwargs)
        return torch.autocast(self.device.type, dtype=self.dtype, **arguments)


class BF16Precision(AutocastPrecision):
    """bf16 autocast, no loss scaling (bf16 has fp32's range). Real on CPU."""

    name = "bf16"
    dtype = torch.bfloat16


class FP16Precision(AutocastPrecision):
    """fp16 autocast with dynamic loss scaling (``torch.amp.GradScaler``).

    Steps with inf/nan gradients are skipped and the scale backs off. ``GradScaler.update``
    runs once per iteration, after every optimizer has stepped (it is deferred to the next
    backward, or done when :attr:`scaler` / :meth:`state_dict` is read), so several
    optimizers and gradient clipping share one consistent scale.
    """

    name = "fp16"
    dtype = torch.float16

    def __init__(self, *, device: torch.device | str | None = None,
                 autocast_kwargs: AutocastKwargs | None = None,
                 scaler_kwargs: GradScalerKwargs | None = None) -> None:
        super().__init__(device=device, autocast_kwargs=autocast_kwargs)
        self.scaler_kwargs = scaler_kwargs or GradScalerKwargs()
        self._scaler = make_grad_scaler(self.device, self.scaler_kwargs) \
            if self.scaler_kwargs.enabled else None
        self._unscaled: set[int] = set()
        self._stepped: set[int] = set()
        self._sharded = False

    @classmethod
    def from_handlers(cls, device: torch.device, *, autocast: AutocastKwargs | None = None,
                      scaler: GradScalerKwargs | None = None,
                      ao_recipe: AORecipeKwargs | None = None,
                      te_recipe: TERecipeKwargs | None = None) -> FP16Precision:
        return cls(device=device, autocast_kwargs=autocast, scaler_kwargs=scaler)

    def use_sharded_scaler(self, process_group: Any = None) -> None:
        """Scale through torch's ``ShardedGradScaler`` from now on (sharded models: FSDP2).

        Each rank holds only its shards of the gradients, so each sees inf/nan in its own
        shards only; this scaler all-reduces that finding over ``process_group`` (default:
        every process), so every rank skips the same steps and keeps the same scale. The
        scale reached so far carries over. A no-op without loss scaling.
        """
        if self._scaler is None:
            return
        from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

        options = self.scaler_kwargs.to_kwargs()
        sharded = ShardedGradScaler(self.device.type, process_group=process_group, **options)
        sharded.load_state_dict(self.scaler.state_dict())  # the scale reached so far
        self._scaler, self._sharded = sharded, True

    def adapt_to_sharding(self) -> None:
        self.use_sharded_scaler()

    def _quiet(self, function: Callable[..., Any], *args: Any) -> Any:
        """Call ``function``; with the sharded scaler, without torch's per-step warning that
        the one-element inf flag becomes a replicated DTensor (the scaler all-reduces it
        next, which is the point)."""
        if not self._sharded:
            return function(*args)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="Found a non-scalar tensor with numel=1")
            return function(*args)

    def _update(self) -> None:
        """Apply the pending ``GradScaler.update`` (after the iteration's optimizer steps)."""
        if self._stepped:
            self._scaler.update()  # type: ignore[union-attr]
            self._stepped.clear()
        self._unscaled.clear()

    @property
    def scaler(self) -> torch.amp.GradScaler | None:
        if self._scaler is not None:
            self._update()
        return self._scaler

    def pre_backward(self, loss: torch.Tensor) -> torch.Tensor:
        if self._scaler is None:
            return loss
        self._update()
        return self._scaler.scale(loss)

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        key = id(optimizer)
        if self._scaler is None or key in self._unscaled or key in self._stepped:
            return
        self._quiet(self._scaler.unscale_, optimizer)
        self._unscaled.add(key)

    def optimizer_step(self, optimizer: torch.optim.Optimizer,
                       closure: Callable[[], Any] | None = None) -> bool:
        if self._scaler is None:
            return super().optimizer_step(optimizer, closure)
        if id(optimizer) in self._stepped:  # a second step without a backward in between
            self._update()
        stepped = self._quiet(step_with_scaler, self._scaler, optimizer, closure)
        self._stepped.add(id(optimizer))
        return stepped

    def state_dict(self) -> dict[str, Any]:
        scaler = self.scaler
        return {} if scaler is None else scaler.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        scaler = self.scaler
        if scaler is not None and state_dict:
            scaler.load_state_dict(state_dict)
