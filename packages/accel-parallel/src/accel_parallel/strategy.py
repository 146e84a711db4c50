"""The Strategy interface: everything backend-specific about a training run.

The facade resolves its arguments into one :class:`~accel_precision.Precision` and one
Strategy, hands the strategy every object of a ``prepare`` call together, and from then on
calls only the hooks below — it never asks which backend it holds (DESIGN.md §4, §8).
A strategy owns:

- **preparing** (:meth:`Strategy.prepare`): models, optimizers, schedulers and data
  loaders of one call, grouped by kind; the per-kind defaults keep single-device and DDP
  simple, an engine overrides :meth:`prepare` to initialise everything at once;
- **the step**: :meth:`backward` (with accumulation division and loss scaling),
  :meth:`optimizer_step`, :meth:`zero_grad`, :meth:`unscale_gradients`, clipping, the
  accumulation boundary (a :class:`~accel_state.MicroStep` handed to :meth:`backward`,
  :meth:`accumulation_context` (which ``no_sync`` implements for DDP) and
  :meth:`should_step`) and :meth:`unwrap_model`;
- **the topology** the data side uses: the data-parallel rank, size and group
  (:attr:`dp_rank`, :attr:`dp_size`, :attr:`dp_group`), the per-dimension ranks and
  :attr:`distributed_type`;
- **the checkpoint format** (:meth:`checkpoint_format`).

How each default behaves is the single-process behaviour; subclasses override only what
they change.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import torch
from accel_precision import NoPrecision, Precision
from accel_state import MicroStep

from accel_parallel.capabilities import RunCapabilities
from accel_parallel.choosing import Choosable
from accel_parallel.compile import compile_model, has_compiled_regions, is_compiled_module
from accel_parallel.rebind import parameter_moves, rebind_optimizer
from accel_parallel.slow_steps import announce_first_forward
from accel_parallel.strategy_registry import STRATEGIES
from accel_parallel.unwrap import extract_model_from_parallel, is_sharded_model

if TYPE_CHECKING:
    from accel_state import PartialState

    from accel_parallel.choosing import Choosable
from accel_parallel.compile import TorchDynamoPlugin

__all__ = ["Strategy", "SupportsNoSync", "STRATEGIES", "PrepareRequest", "StrategyConfig",
           "NO_CONTEXT", "BOUNDARY"]

#: The shared no-op context the base hooks return (entering it has no state): a caller on a
#: hot path may skip entering it, as ``accumulate()`` does on every micro-step.
NO_CONTEXT = contextlib.nullcontext()
#: A batch outside ``accumulate()``'s cycles: it syncs and the optimizers step (the default
#: ``micro_step`` of a direct :meth:`Strategy.backward` call). Never modified.
BOUNDARY = MicroStep()


@dataclass(frozen=True, kw_only=True)
class StrategyConfig:
    """What a strategy is chosen and built from: the Accelerator's resolved configuration."""

    #: the process state (device, ranks, whether several processes run)
    state: PartialState
    #: the resolved mixed precision, handed to the strategy
    precision: Precision
    #: kwargs handlers by kind (``"ddp"``: ``DistributedDataParallelKwargs``, ...)
    handlers: Mapping[str, Any] = field(default_factory=dict)
    #: parallelism plugins by kind (``"fsdp"``, ``"deepspeed"``, ``"tp"``,
    #: ``"parallelism_config"``; ``"dynamo"``: a ``TorchDynamoPlugin`` every strategy
    #: applies through :meth:`Strategy.compile_model`), absent when not given
    plugins: Mapping[str, Any] = field(default_factory=dict)
    #: a strategy (or preset) asked for by name; default: ``ACCEL_STRATEGY``, else chosen by
    #: data (:func:`~accel_parallel.select_strategy`)
    requested: str | None = None
    #: options for the strategy named (a config file's ``strategy_config``), applied by
    #: :meth:`Strategy.configure`; default (None): ``ACCEL_STRATEGY_CONFIG``
    options: Mapping[str, Any] | None = None
    #: who named :attr:`requested`, for messages (``Accelerator(strategy=...)``)
    requested_by: str = "StrategyConfig(requested=...)"


@dataclass
class PrepareRequest:
    """The objects of one ``prepare`` call, grouped by kind, each list in the user's order.

    :meth:`Strategy.prepare` returns one of these with the prepared objects at the same
    positions (an engine may replace an optimizer by its own; the lists keep their lengths).
    """

    models: list[torch.nn.Module] = field(default_factory=list)
    optimizers: list[torch.optim.Optimizer] = field(default_factory=list)
    schedulers: list[Any] = field(default_factory=list)
    dataloaders: list[Any] = field(default_factory=list)
    #: per model: move it to the strategy's device
    device_placement: list[bool] = field(default_factory=list)
    #: prepare models for inference only (no gradient synchronisation wrapper)
    evaluation_mode: bool = False
    #: batches accumulated per optimizer step (``gradient_accumulation_steps``): an engine
    #: that owns the step (DeepSpeed) configures itself with it
    accumulation_steps: int = 1


class Strategy(Choosable, RunCapabilities):
    """Base strategy: one process, one device; every hook is that setting's behaviour.
    How strategies are chosen, checked and given options: :class:`~accel_parallel.choosing.
    Choosable` (``claims``, ``check``, ``priority``, ``handler_kinds``, ``options_class``);
    what the facade may ask about the run: :class:`~accel_parallel.capabilities.
    RunCapabilities` (``shards_parameters``, ``replicates_parameters``, ...).

    Args:
        state: the process's :class:`~accel_state.PartialState` (device, ranks).
        precision: the resolved mixed precision; the strategy decides how it applies
            (autocast around forward by default) and owns its loss scaler.
    """

    #: how prepared models are compiled (``TorchDynamoPlugin``); set by
    #: :func:`~accel_parallel.select_strategy` from the configuration, None: not compiled
    dynamo_plugin: TorchDynamoPlugin | None = None

    def __init__(self, state: PartialState, *, precision: Precision | None = None,
                 **options: Any) -> None:
        self.state = state
        self.precision = precision if precision is not None else NoPrecision(device=state.device)
        self.options = options
        # whether accumulation micro-steps have anything to defer (``no_sync`` overridden)
        self._defers_sync = type(self).no_sync is not Strategy.no_sync

    # -- topology (the run-type questions: accel_parallel.capabilities) -----------------------
    @property
    def dp_size(self) -> int:
        """Number of data-parallel replicas: how many different batches one step sees."""
        return self.state.num_processes

    @property
    def dp_rank(self) -> int:
        """This process's index among the data-parallel replicas (which shard it reads)."""
        return self.state.process_index

    @property
    def dp_group(self) -> Any:
        """Process group of this process's data-parallel peers; None: every process."""
        return None

    @property
    def parallel_sizes(self) -> dict[str, int]:
        """Size of each parallel dimension of the mesh (``dp_replicate``, ``dp_shard``,
        ``tp``, ``cp``); their product is the number of processes."""
        return {"dp_replicate": self.dp_size}

    @property
    def parallel_ranks(self) -> dict[str, int]:
        """This process's coordinate along each dimension of :attr:`parallel_sizes`."""
        return {"dp_replicate": self.dp_rank}

    @property
    def device_mesh(self) -> Any:
        """The run's one named ``DeviceMesh`` (FSDP2, TP, N-D strategies); None without one."""
        return None

    @property
    def parallelism_config(self) -> Any:
        """The ``ParallelismConfig`` the mesh was built from, when there is one."""
        return None

    # -- prepare ------------------------------------------------------------------------------
    def prepare(self, request: PrepareRequest) -> PrepareRequest:
        """Prepare every object of one ``prepare`` call; models first.

        Optimizers built before ``prepare`` are re-bound when a model's preparation
        replaced its parameters (sharding does); then each kind's hook runs.
        """
        before = [dict(m.named_parameters()) for m in request.models]
        placements = request.device_placement or [True] * len(request.models)
        models = [self.prepare_model(m, device_placement=p,
                                     evaluation_mode=request.evaluation_mode)
                  for m, p in zip(request.models, placements, strict=True)]
        moves = parameter_moves(before, [dict(self.unwrap_model(m, keep_torch_compile=False)
                                              .named_parameters()) for m in models])
        optimizers = [self.prepare_optimizer(rebind_optimizer(o, moves) if moves else o)
                      for o in request.optimizers]
        models = [self.compile_model(m) for m in models]
        return PrepareRequest(models=models, optimizers=optimizers,
                              schedulers=[self.prepare_scheduler(s) for s in request.schedulers],
                              dataloaders=[self.prepare_data_loader(d)
                                           for d in request.dataloaders],
                              device_placement=placements,
                              evaluation_mode=request.evaluation_mode,
                              accumulation_steps=request.accumulation_steps)

    def prepare_model(self, model: torch.nn.Module, *, device_placement: bool = True,
                      evaluation_mode: bool = False) -> torch.nn.Module:
        """Apply the precision to the model (fp8 layers, autocast forward), move it to the
        device when asked, and wrap it for this strategy (nothing to wrap here)."""
        model = self.precision.wrap_forward(self.precision.convert_module(model))
        if device_placement:
            model = model.to(self.state.device)
        return model

    def compile_model(self, model: torch.nn.Module, *, in_place: bool = False) -> torch.nn.Module:
        """``model`` compiled as :attr:`dynamo_plugin` asks (unchanged without one, or when
        already compiled). :meth:`prepare` calls it on every prepared model, after the
        strategy's wrappers; a strategy that compiles earlier in its own order (before
        sharding) calls it there with ``in_place=True``, and the later call does nothing."""
        if is_compiled_module(model) or has_compiled_regions(model):
            return model
        compiled = compile_model(model, self.dynamo_plugin, in_place=in_place)
        if is_compiled_module(compiled) or has_compiled_regions(compiled):
            announce_first_forward(compiled, main=self.state.is_local_main_process)
        return compiled

    def prepare_optimizer(self, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        """The optimizer to step (already re-bound to the prepared parameters)."""
        return optimizer

    def prepare_scheduler(self, scheduler: Any) -> Any:
        return scheduler

    def prepare_data_loader(self, dataloader: Any) -> Any:
        """Seen before the facade shards it over :attr:`dp_size` (an engine may read its
        batch size here)."""
        return dataloader

    def unwrap_model(self, model: torch.nn.Module, keep_fp32_wrapper: bool = True,
                     keep_torch_compile: bool = True) -> torch.nn.Module:
        """The user's own module inside whatever this strategy wrapped around it."""
        return extract_model_from_parallel(model, keep_fp32_wrapper, keep_torch_compile)

    def tracked_model(self, model: torch.nn.Module) -> torch.nn.Module:
        """The object Accelerate keeps for a prepared model (its ``accelerator._models``),
        which save/load state hooks receive: the module inside a data-parallel wrapper
        (scripts call ``save_pretrained`` on it); a strategy whose prepared model is an
        engine Accelerate tracks as such returns that engine."""
        return self.unwrap_model(model, keep_torch_compile=False)

    # -- the step -----------------------------------------------------------------------------
    def backward(self, loss: torch.Tensor, *, accumulation_steps: int = 1,
                 micro_step: MicroStep = BOUNDARY, **kwargs: Any) -> None:
        """Backward of ``loss`` divided by ``accumulation_steps`` (so accumulated gradients
        are the mean over the large batch) and scaled by the precision (fp16).
        ``micro_step``: this batch's place in accumulation (whether it ends a cycle, its
        index, whether it is the dataloader's last), as ``accumulate()`` decided it; the
        facade passes it, so no strategy reads the process-wide ``GradientState``. Here the
        reduction is deferred by :meth:`no_sync` around the forward, and it is not needed."""
        if accumulation_steps > 1:
            loss = loss / accumulation_steps
        self.precision.pre_backward(loss).backward(**kwargs)

    def should_step(self, micro_step: MicroStep) -> bool:
        """Whether the prepared optimizers and schedulers step after this batch: at the end
        of an accumulation cycle (``micro_step.sync``). A strategy with another rule (an
        engine that decides its own boundary) overrides it; the wrappers only ask."""
        return micro_step.sync

    @property
    def scaler(self) -> torch.amp.GradScaler | None:
        """The loss scaler in use (the precision's by default), else None."""
        return self.precision.scaler

    # -- what runs: the precision, as this strategy applies it ----------------------------------
    @property
    def mixed_precision(self) -> str:
        """The precision prepared models compute in (Accelerate's ``mixed_precision``): the
        resolved precision's name, unless the backend's own config decides it."""
        return self.precision.name

    @property
    def native_amp(self) -> bool:
        """Whether prepared models run forward under ``torch.autocast``."""
        return self.precision.native_amp

    def forward_context(self, autocast_handler: Any = None
                        ) -> contextlib.AbstractContextManager[Any]:
        """The context of ``accelerator.autocast()``: the precision's autocast by default."""
        return self.precision.forward_context(autocast_handler)

    def unscale_gradients(self, optimizer: torch.optim.Optimizer) -> None:
        """Bring ``optimizer``'s gradients to their true scale (before clipping)."""
        self.precision.unscale_(optimizer)

    def optimizer_step(self, optimizer: torch.optim.Optimizer, closure: Any = None) -> bool:
        """Step ``optimizer``; False when the step was skipped (inf/nan under fp16)."""
        return self.precision.optimizer_step(optimizer, closure)

    def zero_grad(self, optimizer: torch.optim.Optimizer, set_to_none: bool = True) -> None:
        optimizer.zero_grad(set_to_none=set_to_none)

    def clip_grad_norm_(self, parameters: Any, max_norm: float,
                        norm_type: float = 2) -> torch.Tensor:
        """Clip the gradients' total norm (already unscaled); returns the norm before."""
        return torch.nn.utils.clip_grad_norm_(parameters, max_norm, norm_type=norm_type)

    def clip_grad_value_(self, parameters: Any, clip_value: float) -> None:
        torch.nn.utils.clip_grad_value_(parameters, clip_value)

    def no_sync(self, model: torch.nn.Module) -> contextlib.AbstractContextManager[None]:
        """Skip gradient synchronisation inside the block (a no-op without data parallelism)."""
        return NO_CONTEXT

    def sync_in_backward(self, model: torch.nn.Module) -> contextlib.AbstractContextManager[None]:
        """``Accelerator.trigger_sync_in_backward``: the backward inside the block reduces
        gradients although the forward ran under :meth:`no_sync` (a no-op here)."""
        return NO_CONTEXT

    def context_parallel(self, buffers: Any = None, buffer_seq_dims: Any = None,
                         no_restore_buffers: Any = None) -> contextlib.AbstractContextManager[Any]:
        """``Accelerator.maybe_context_parallel``: shard ``buffers`` along their sequence
        dimension for the block when the strategy runs context parallelism (a no-op here)."""
        return NO_CONTEXT

    def accumulation_context(self, models: tuple[torch.nn.Module, ...] | list[torch.nn.Module],
                             micro_step: MicroStep) -> contextlib.AbstractContextManager[Any]:
        """Context of one micro-step inside ``accumulate()``; ``micro_step.reduce`` is False
        when this batch only accumulates (the gradient reduction can wait for the boundary)."""
        if micro_step.reduce or not models or not self._defers_sync:
            return NO_CONTEXT
        return self._without_sync(models)

    @contextlib.contextmanager
    def _without_sync(self, models: Any) -> Iterator[None]:
        with contextlib.ExitStack() as stack:
            for model in models:
                stack.enter_context(self.no_sync(model))
            yield

    def join(self, joinables: list[Any], *,
             enable: bool) -> contextlib.AbstractContextManager[Any] | None:
        """A context in which ranks that run out of batches keep answering the others'
        collectives until every rank is done (torch's ``Join``), or None where this strategy
        has no such thing (``Accelerator.join_uneven_inputs`` then warns and does nothing)."""
        return None

    # -- checkpoints --------------------------------------------------------------------------
    def checkpoint_format(self, models: list[torch.nn.Module]) -> Any:
        """The checkpoint layout for these prepared models: a layout name registered with
        accel-checkpoint (``"replicated"``: full state dicts written by rank 0;
        ``"sharded"``: every rank writes its DTensor shards through DCP), or a writer
        object of the strategy's own (an engine's checkpoint)."""
        return "sharded" if any(is_sharded_model(m) for m in models) else "replicated"

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(device={self.state.device}, "
                f"world={self.state.num_processes}, precision={self.precision.name!r})")


@runtime_checkable
class SupportsNoSync(Protocol):
    """A wrapped model that can accumulate gradients locally (``DistributedDataParallel``)."""

    def no_sync(self) -> contextlib.AbstractContextManager[None]: ...

