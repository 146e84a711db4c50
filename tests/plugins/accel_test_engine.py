"""Test-only strategies, registered through the ``accel.strategies`` entry point (see
this folder's README). They use only accel-parallel's public interface, as a third-party
backend would."""

from __future__ import annotations

import contextlib
from typing import Any

import torch
import torch.distributed as dist
from accel_parallel import PrepareRequest, Strategy, extract_model_from_parallel
from accel_state import ConfigurationError, GradientState

__all__ = ["Engine", "EngineStrategy", "ReplicatedDataStrategy"]


class Engine(torch.nn.Module):
    """A toy training engine in DeepSpeed's style: it holds the model and the optimizer,
    divides the loss for accumulation itself, all-reduces the gradients itself (only at
    the accumulation boundary) and takes the optimizer step. It counts what it was asked."""

    def __init__(self, module: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        super().__init__()
        self.module = module
        self.optimizer = optimizer
        self.backward_calls = 0
        self.reductions = 0
        self.steps = 0

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.module(*args, **kwargs)

    def backward(self, loss: torch.Tensor, accumulation_steps: int) -> None:
        (loss / accumulation_steps).backward()
        self.backward_calls += 1
        if GradientState().sync_gradients:
            self._all_reduce()

    def _all_reduce(self) -> None:
        self.reductions += 1
        if not (dist.is_initialized() and dist.get_world_size() > 1):
            return
        for parameter in self.module.parameters():
            if parameter.grad is not None:
                dist.all_reduce(parameter.grad)
                parameter.grad /= dist.get_world_size()

    def step(self) -> None:
        self.optimizer.step()
        self.steps += 1

    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)


class EngineStrategy(Strategy):
    """Hands model and optimizer to an :class:`Engine` together and lets it own the step."""

    name = "test-engine"

    def __init__(self, state: Any, **options: Any) -> None:
        super().__init__(state, **options)
        self.engine: Engine | None = None

    def prepare(self, request: PrepareRequest) -> PrepareRequest:
        if len(request.models) > 1 or len(request.models) != len(request.optimizers):
            raise ConfigurationError(
                "test-engine needs one model and its optimizer in the same prepare() call, "
                f"got {len(request.models)} model(s) and {len(request.optimizers)} optimizer(s).")
        if not request.models:
            return request
        model = request.models[0].to(self.state.device)
        self.engine = Engine(model, request.optimizers[0])
        return PrepareRequest(models=[self.engine], optimizers=[self.engine.optimizer],
                              schedulers=request.schedulers, dataloaders=request.dataloaders,
                              device_placement=request.device_placement)

    def backward(self, loss: torch.Tensor, *, accumulation_steps: int = 1,
                 **kwargs: Any) -> None:
        assert self.engine is not None
        self.engine.backward(loss, accumulation_steps)

    def optimizer_step(self, optimizer: torch.optim.Optimizer, closure: Any = None) -> bool:
        assert self.engine is not None and optimizer is self.engine.optimizer
        self.engine.step()
        return True

    def zero_grad(self, optimizer: torch.optim.Optimizer, set_to_none: bool = True) -> None:
        assert self.engine is not None
        self.engine.zero_grad()

    def accumulation_context(self, models: Any, micro_step: Any) -> Any:
        return contextlib.nullcontext()  # the engine defers its reduction by itself

    def unwrap_model(self, model: torch.nn.Module, keep_fp32_wrapper: bool = True,
                     keep_torch_compile: bool = True) -> torch.nn.Module:
        if isinstance(model, Engine):
            model = model.module
        return extract_model_from_parallel(model, keep_fp32_wrapper, keep_torch_compile)


class ReplicatedDataStrategy(Strategy):
    """Every process is a data-parallel group of its own (size 1), as when all processes
    form one tensor-parallel group: each reads the whole dataset and nothing is reduced
    across processes. Models are only moved."""

    name = "test-replicated-data"

    def __init__(self, state: Any, **options: Any) -> None:
        super().__init__(state, **options)
        world = state.num_processes
        groups = [dist.new_group([rank]) for rank in range(world)] if world > 1 else [None]
        self._group = groups[state.process_index]

    @property
    def dp_size(self) -> int:
        return 1

    @property
    def dp_rank(self) -> int:
        return 0

    @property
    def dp_group(self) -> Any:
        return self._group

    @property
    def parallel_sizes(self) -> dict[str, int]:
        return {"dp_replicate": 1, "tp": self.state.num_processes}

    @property
    def parallel_ranks(self) -> dict[str, int]:
        return {"dp_replicate": 0, "tp": self.state.process_index}
