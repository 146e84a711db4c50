"""Accelerate's DeepSpeed helper names that transformers and other libraries import.

accel's DeepSpeedStrategy drives the engine inside ``Accelerator.backward`` and hands back
no-op optimizer/scheduler objects; these classes give the same behaviour to code that
builds Accelerate's wrappers itself. Nothing here imports a strategy module, and
DeepSpeed is imported only by :func:`map_pytorch_optim_to_deepspeed`.
"""

from __future__ import annotations

from typing import Any

import torch
from accel_state import ConfigurationError, DistributedType

from accel_parallel.compile import compile_regions
from accel_parallel.deepspeed.runtime import import_deepspeed

__all__ = ["DeepSpeedEngineWrapper", "DeepSpeedOptimizerWrapper", "compile_regions_deepspeed",
           "get_active_deepspeed_plugin", "map_pytorch_optim_to_deepspeed"]


def get_active_deepspeed_plugin(state: Any) -> Any:
    """The DeepSpeed plugin ``state`` (an ``AcceleratorState``) runs with; an error when
    DeepSpeed is not in use."""
    if getattr(state, "distributed_type", None) is not DistributedType.DEEPSPEED:
        raise ConfigurationError(
            f"No active DeepSpeed plugin: the state's distributed_type is "
            f"{getattr(state, 'distributed_type', None)!s}, not DEEPSPEED. Pass "
            "Accelerator(deepspeed_plugin=DeepSpeedPlugin(...)) or launch with --use_deepspeed.")
    return state.deepspeed_plugin


class DeepSpeedEngineWrapper:
    """Runs backward through a DeepSpeed engine: the engine scales, reduces and clips, and
    steps its optimizer and scheduler only at a gradient-accumulation boundary."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine

    def backward(self, loss: torch.Tensor, sync_gradients: bool = True, **kwargs: Any) -> None:
        """``engine.backward(loss)``, then ``engine.step()`` when ``sync_gradients``."""
        self.engine.set_gradient_accumulation_boundary(is_boundary=sync_gradients)
        self.engine.backward(loss, **kwargs)
        if sync_gradients:
            self.engine.step()

    def get_global_grad_norm(self) -> float | None:
        """The gradient norm the engine measured at its last step (None before one)."""
        norm = self.engine.get_global_grad_norm()
        return float(norm.item() if hasattr(norm, "item") else norm) if norm is not None else None


class DeepSpeedOptimizerWrapper:
    """The optimizer as a training loop sees it under DeepSpeed: ``step`` and ``zero_grad``
    do nothing (the engine does both in backward); ``step_was_skipped`` reports an fp16
    overflow the engine skipped."""

    def __init__(self, optimizer: Any) -> None:
        self.optimizer = optimizer

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self.optimizer.param_groups

    @property
    def state(self) -> Any:
        return self.optimizer.state

    @property
    def defaults(self) -> dict[str, Any]:
        return getattr(self.optimizer, "defaults", {})

    def zero_grad(self, set_to_none: bool | None = None) -> None:
        return None  # the engine clears the gradients after its step

    def step(self, closure: Any = None) -> None:
        return None  # the engine steps in DeepSpeedEngineWrapper.backward

    @property
    def step_was_skipped(self) -> bool:
        """Whether the engine skipped its last step (fp16 loss-scale overflow)."""
        return bool(getattr(self.optimizer, "overflow", False))

    def state_dict(self) -> dict[str, Any]:
        return self.optimizer.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state_dict)


def map_pytorch_optim_to_deepspeed(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """DeepSpeed's CPU optimizer equivalent of ``optimizer`` (for optimizer offload), with
    the same parameter groups and hyper-parameters: Adam/AdamW become ``DeepSpeedCPUAdam``
    (AdamW in ``adamw_mode``), Adagrad ``DeepSpeedCPUAdagrad``. Other types are an error
    (DeepSpeed has no CPU kernel for them)."""
    kinds = {torch.optim.Adam: "adam", torch.optim.AdamW: "adamw", torch.optim.Adagrad: "adagrad"}
    kind = kinds.get(type(optimizer))
    if kind is None:
        raise ConfigurationError(
            f"map_pytorch_optim_to_deepspeed({type(optimizer).__name__}): DeepSpeed has CPU "
            "optimizers for torch.optim.Adam, AdamW and Adagrad only; use one of those or "
            "turn optimizer offload off.")
    import_deepspeed()
    defaults = optimizer.defaults
    common = {"lr": defaults["lr"], "eps": defaults["eps"],
              "weight_decay": defaults["weight_decay"]}
    if kind == "adagrad":
        from deepspeed.ops.adagrad import DeepSpeedCPUAdagrad

        return DeepSpeedCPUAdagrad(optimizer.param_groups, **common)
    from deepspeed.ops.adam import DeepSpeedCPUAdam

    return DeepSpeedCPUAdam(optimizer.param_groups, betas=defaults["betas"],
                            adamw_mode=kind == "adamw", **common)


def compile_regions_deepspeed(module: torch.nn.Module, **compile_kwargs: Any) -> None:
    """Regional compilation for a model DeepSpeed runs: each repeated block (or the whole
    model) is compiled in place with ``nn.Module.compile``, so the engine's hooks and
    parameter objects stay as they are. Given the engine, its ``.module`` is compiled."""
    inner = getattr(module, "module", module)
    if not isinstance(inner, torch.nn.Module):
        raise ConfigurationError(f"compile_regions_deepspeed({type(module).__name__}) needs an "
                                 "nn.Module or a DeepSpeed engine holding one in .module.")
    compile_regions(inner, **compile_kwargs)
