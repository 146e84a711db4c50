"""Data parallelism with ``torch.nn.parallel.DistributedDataParallel``."""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from accel_state import ConfigurationError, KwargsHandler

from accel_parallel.choosing import RunEnvironment, Unmet
from accel_parallel.compile import is_compiled_module
from accel_parallel.strategy import Strategy
from accel_parallel.unwrap import is_sharded_model

if TYPE_CHECKING:
    from accel_precision import Precision
    from accel_state import PartialState

    from accel_parallel.selection import StrategyConfig

__all__ = ["DDPStrategy", "DistributedDataParallelKwargs", "DDPCommunicationHookType", "wrap_ddp",
           "join_ddp", "sync_ddp_in_backward"]


class DDPCommunicationHookType(str, enum.Enum):
    """Gradient compression hooks DDP can register (Accelerate's names)."""

    NO = "no"
    FP16 = "fp16"
    BF16 = "bf16"
    POWER_SGD = "power_sgd"
    BATCHED_POWER_SGD = "batched_power_sgd"


@dataclass
class DistributedDataParallelKwargs(KwargsHandler):
    """Options for ``DistributedDataParallel`` (only fields changed from default are passed)."""

    dim: int = 0
    broadcast_buffers: bool = True
    bucket_cap_mb: int = 25
    find_unused_parameters: bool = False
    check_reduction: bool = False
    gradient_as_bucket_view: bool = False
    static_graph: bool = False
    comm_hook: DDPCommunicationHookType = DDPCommunicationHookType.NO
    comm_wrapper: DDPCommunicationHookType = DDPCommunicationHookType.NO
    comm_state_option: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("comm_hook", "comm_wrapper"):
            value = getattr(self, name)
            try:
                setattr(self, name, DDPCommunicationHookType(value))
            except ValueError:
                choices = ", ".join(repr(t.value) for t in DDPCommunicationHookType)
                raise ConfigurationError(
                    f"DistributedDataParallelKwargs({name}={value!r}) is not a known hook; "
                    f"use one of {choices}."
                ) from None

    def ddp_arguments(self) -> dict[str, Any]:
        """Keyword arguments for the DDP constructor (the hook fields are not DDP's)."""
        kwargs = self.to_kwargs()
        for name in ("comm_hook", "comm_wrapper", "comm_state_option"):
            kwargs.pop(name, None)
        return kwargs

    def register_comm_hook(self, model: torch.nn.parallel.DistributedDataParallel) -> None:
        """Register the requested compression hook (optionally wrapped) on a DDP model."""
        if self.comm_hook is DDPCommunicationHookType.NO:
            return
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

        hooks = {
            DDPCommunicationHookType.FP16: default_hooks.fp16_compress_hook,
            DDPCommunicationHookType.BF16: default_hooks.bf16_compress_hook,
            DDPCommunicationHookType.POWER_SGD: powerSGD_hook.powerSGD_hook,
            DDPCommunicationHookType.BATCHED_POWER_SGD: powerSGD_hook.batched_powerSGD_hook,
        }
        wrappers = {
            DDPCommunicationHookType.FP16: default_hooks.fp16_compress_wrapper,
            DDPCommunicationHookType.BF16: default_hooks.bf16_compress_wrapper,
        }
        hook = hooks[self.comm_hook]
        state = None
        if self.comm_hook in (DDPCommunicationHookType.POWER_SGD,
                              DDPCommunicationHookType.BATCHED_POWER_SGD):
            state = powerSGD_hook.PowerSGDState(process_group=None, **self.comm_state_option)
        if self.comm_wrapper is not DDPCommunicationHookType.NO:
            if self.comm_wrapper not in wrappers:
                raise ConfigurationError(
                    f"comm_wrapper={self.comm_wrapper.value!r} is not a wrapper; use 'fp16' or 'bf16'."
                )
            hook = wrappers[self.comm_wrapper](hook)
        model.register_comm_hook(state, hook)


class DDPStrategy(Strategy):
    """Replicate the model on every process and all-reduce gradients in backward.

    The worked example of the Strategy interface (docs/architecture.md): it claims a run of
    several processes (:meth:`claims`), needs their process group (:meth:`check`), wraps
    models in ``DistributedDataParallel`` (:meth:`prepare_model`) and skips the all-reduce
    on accumulation micro-steps
    (:meth:`no_sync`); every other hook is the base default.
    """

    name = "ddp"
    priority = 10
    #: its options (``--strategy ddp --strategy_config '{"find_unused_parameters": true}'``)
    handler_kinds = {"ddp": DistributedDataParallelKwargs}

    def __init__(self, state: PartialState, *, precision: Precision | None = None,
                 ddp_kwargs: DistributedDataParallelKwargs | None = None,
                 **options: Any) -> None:
        super().__init__(state, precision=precision, **options)
        self.ddp_kwargs = ddp_kwargs or DistributedDataParallelKwargs()

    @classmethod
    def claims(cls, config: StrategyConfig) -> bool:
        return config.state.use_distributed

    @classmethod
    def check(cls, config: StrategyConfig, environment: RunEnvironment) -> list[Unmet]:
        if environment.process_group:
            return []
        return [Unmet(
            f"DistributedDataParallel needs a process group, and this run of "
            f"{environment.num_processes} process(es) has none",
            "start several processes with `accel launch --num_processes N` (N > 1), or leave "
            "the strategy unnamed so a one-process run uses 'single'")]

    @classmethod
    def from_config(cls, config: StrategyConfig) -> DDPStrategy:
        return cls(config.state, precision=config.precision,
                   ddp_kwargs=config.handlers.get("ddp"))

    def prepare_model(self, model: torch.nn.Module, *, device_placement: bool = True,
                      evaluation_mode: bool = False) -> torch.nn.Module:
        model = super().prepare_model(model, device_placement=device_placement)
        if evaluation_mode or not any(p.requires_grad for p in model.parameters()):
            return model  # nothing to synchronise: DDP would refuse a model without gradients
        if is_sharded_model(model):
            return model  # sharded by the user (fully_shard, TP): it reduces its own gradients
        return wrap_ddp(model, self.ddp_kwargs)

    def no_sync(self, model: torch.nn.Module) -> contextlib.AbstractContextManager[None]:
        # the class check, not the SupportsNoSync protocol: this runs on every accumulation
        # micro-step, and a runtime protocol check costs about 10 us there
        if isinstance(model, torch.nn.parallel.DistributedDataParallel):
            return model.no_sync()
        if is_compiled_module(model):  # torch.compile(DDP(model)): the wrapper is inside
            return self.no_sync(model._orig_mod)
        return super().no_sync(model)

    def sync_in_backward(self, model: torch.nn.Module) -> contextlib.AbstractContextManager[None]:
        return sync_ddp_in_backward(model)

    def join(self, joinables: list[Any], *,
             enable: bool) -> contextlib.AbstractContextManager[Any] | None:
        return join_ddp(joinables, enable=enable)


def join_ddp(joinables: list[Any], *, enable: bool) -> contextlib.AbstractContextManager[Any]:
    """torch's ``Join`` over the DDP models (and ZeroRedundancyOptimizers) given, seen
    through a compile wrapper or an accel optimizer wrapper (the DDP strategy's and the mesh
    strategy's DDP mode's ``join``)."""
    from torch.distributed.algorithms import Join, Joinable

    inner = []
    for obj in joinables:
        if is_compiled_module(obj):
            obj = obj._orig_mod
        if not isinstance(obj, Joinable) and isinstance(getattr(obj, "optimizer", None),
                                                        Joinable):
            obj = obj.optimizer
        if not isinstance(obj, Joinable):
            raise ConfigurationError(
                f"join_uneven_inputs got {type(obj).__name__}, which cannot join: pass the "
                "prepared DDP models (and ZeroRedundancyOptimizer optimizers) only.")
        inner.append(obj)
    return Join(inner, enable=enable, throw_on_early_termination=False)


@contextlib.contextmanager
def sync_ddp_in_backward(model: torch.nn.Module) -> Iterator[None]:
    """Make the next backward of a ``DistributedDataParallel`` model (seen through a compile
    wrapper) all-reduce its gradients although its forward ran under ``no_sync``.

    DDP decides in forward whether the backward reduces: under ``no_sync`` the forward leaves
    the reducer unprepared and the sync flags off. Turning the flags on and preparing the
    reducer (with no outputs to search for unused parameters) arms the backward hooks; the
    flags are restored afterwards. Any other model: a no-op.
    """
    if is_compiled_module(model):
        model = model._orig_mod
    if not isinstance(model, torch.nn.parallel.DistributedDataParallel):
        yield
        return
    backward_sync, forward_sync = model.require_backward_grad_sync, model.require_forward_param_sync
    model.require_backward_grad_sync = model.require_forward_param_sync = True
    model.reducer.prepare_for_backward([])
    try:
        yield
    finally:
        model.require_backward_grad_sync = backward_sync
        model.require_forward_param_sync = forward_sync


def wrap_ddp(model: torch.nn.Module, ddp_kwargs: DistributedDataParallelKwargs | None,
             process_group: Any = None) -> torch.nn.parallel.DistributedDataParallel:
    """``model`` in torch's DDP over ``process_group`` (None: every process) on the device
    its parameters are on, with the handler's constructor options and comm hook: the one
    place accel builds DDP (the DDP strategy, and the mesh strategy's data-parallel step).

    ``broadcast_buffers`` is Accelerate's field and is passed as given. torch 2.13 deprecated
    it (with a ``FutureWarning`` on every construction) in favour of
    ``forward_sync_buffers``, which is not the same thing: ``forward_sync_buffers=False``
    still syncs the buffers at construction, which ``broadcast_buffers=False`` does not, so
    accel keeps the field's meaning and silences that one warning."""
    import warnings

    options = ddp_kwargs.ddp_arguments() if ddp_kwargs is not None else {}
    device = next(model.parameters()).device
    device_ids = None if device.type == "cpu" else [device.index or 0]
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*`broadcast_buffers` is deprecated",
                                category=FutureWarning)
        wrapped = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=device_ids, output_device=device_ids[0] if device_ids else None,
            process_group=process_group, **options)
    if ddp_kwargs is not None:
        ddp_kwargs.register_comm_hook(wrapped)
    return wrapped
