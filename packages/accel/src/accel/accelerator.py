"""The ``Accelerator``: four lines turn a PyTorch script into a distributed one.

It owns the process state, resolves its arguments once into a Precision and a Strategy
(``accel._resolve``) and delegates: data to accel-data, collectives to accel-state, and
everything backend-specific — preparing, backward, steps, clipping, accumulation,
unwrapping, topology, checkpoint format — to the strategy, without asking which one it
is. Kept thin on purpose.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from accel_parallel import NO_CONTEXT, PrepareRequest, Strategy
from accel_state import (
    GradientAccumulationPlugin,
    GradientState,
    PartialState,
)
from accel_state.memory import release_memory
from accel_state.progress import attach as _attach_progress

from accel import _tracking
from accel._accelerator_state import AcceleratorState
from accel._checkpoint_mixin import CheckpointingMixin, init_checkpointing
from accel._data import UNSET as _UNSET
from accel._data import DataMixin, resolve_dataloader_config
from accel._device_map import DeviceMapMixin, refuse_dispatched_models
from accel._handlers import HandlersMixin
from accel._lomo import LomoMixin
from accel._module_compat import forward_to
from accel._parallelism import ParallelismMixin
from accel._precision import PrecisionMixin
from accel._preemption import PreemptionMixin
from accel._process import ProcessMixin
from accel._profiling import ProfilingMixin
from accel._triggers import TriggerMixin
from accel.optimizer import AcceleratedOptimizer
from accel.scheduler import AcceleratedScheduler

__all__ = ["Accelerator"]
__getattr__ = forward_to(__name__, "accel.utils", "accel.state", "accel.data_loader",
                         "accel.logging", "accel.tracking", "accel.checkpointing")



class Accelerator(ProcessMixin, PrecisionMixin, DataMixin, CheckpointingMixin,
                  _tracking.TrackingMixin, ParallelismMixin, PreemptionMixin,
                  HandlersMixin, TriggerMixin, ProfilingMixin, DeviceMapMixin, LomoMixin):
    """Prepare a model, optimizer, dataloader and scheduler for the current launch setting.

    Args:
        device_placement: move prepared models and batches to :attr:`device`.
        cpu: run on the CPU even when an accelerator is present (gloo backend).
        kwargs_handlers: ``InitProcessGroupKwargs`` / ``DistributedDataParallelKwargs`` /
            ``ProfileKwargs`` / ..., one of each (read back as ``ddp_handler``, ...).
        step_scheduler_with_optimizer: step prepared schedulers only when the optimizer steps.
        gradient_accumulation_steps: batches per optimizer step inside :meth:`accumulate`
            (or a ``GradientAccumulationPlugin`` for the finer options).
        fsdp_plugin: a ``FullyShardedDataParallelPlugin``: shard the models with FSDP2
            (also ``ACCELERATE_USE_FSDP=true`` with ``FSDP_*`` variables; docs/parallel.md);
            ``deepspeed_plugin(s)``: DeepSpeed ZeRO (docs/deepspeed.md, ``accel_parallel.plugins``);
            ``parallelism_config`` / ``torch_tp_plugin``: TP, CP, HSDP on one mesh.
        dynamo_backend / dynamo_plugin: compile prepared models with torch.compile (a
            backend name, or a ``TorchDynamoPlugin``; also ``ACCELERATE_DYNAMO_*``).
        mixed_precision: ``"no"``, ``"fp16"``, ``"bf16"`` or ``"fp8"``; must agree with
            ``accel launch --mixed_precision`` when both are given (see docs/precision.md).
            Precision API: ``accel/_precision.py``.
        strategy: accel only (keyword): a registered strategy or preset name (``"ddp"``,
            ``"zero3"``, a third party's) or a ``Strategy`` instance, as ``accel launch
            --strategy`` names one; checked like every route (docs/migration.md).
    """

    def __init__(self, device_placement: bool = True, split_batches: Any = _UNSET,
                 mixed_precision: Any = None, gradient_accumulation_steps: int = 1,
                 cpu: bool = False, dataloader_config: Any = None,
                 deepspeed_plugin: Any = None, fsdp_plugin: Any = None,
                 torch_tp_plugin: Any = None, megatron_lm_plugin: Any = None,
                 rng_types: list[Any] | None = None, log_with: Any = None,
                 project_dir: Any = None, project_config: Any = None,
                 gradient_accumulation_plugin: GradientAccumulationPlugin | None = None,
                 step_scheduler_with_optimizer: bool = True,
                 kwargs_handlers: list[Any] | None = None, dynamo_backend: Any = None,
                 dynamo_plugin: Any = None, deepspeed_plugins: Any = None,
                 parallelism_config: Any = None, *, strategy: Any = None,
                 **kwargs: Any) -> None:
        # Accelerate's parameters in Accelerate's order (positional calls mean the same).
        # Resolving loads the strategies and precisions: here, not at `import accel`.
        from accel._resolve import (
            collect_handlers,
            refuse_unsupported_plugins,
            reject_unknown_arguments,
            resolve_accumulation,
            resolve_plugins,
            resolve_precision,
            resolve_strategy,
        )

        reject_unknown_arguments(kwargs, Accelerator.__init__)  # names the closest valid one
        refuse_unsupported_plugins("Accelerator", megatron_lm_plugin=megatron_lm_plugin)
        # the launcher's hang watchdog (accel_state.progress): a step counter in shared
        # memory and a stack dump on SIGUSR1, set up before the rendezvous can hang
        self._progress = _attach_progress()
        #: RNGs synchronised from the main process at each epoch of the prepared loaders
        self.rng_types = list(rng_types) if rng_types is not None else None
        # data options (accel/_data.py): dataloader_config, deprecated split_batches=
        self._dataloader_config = resolve_dataloader_config(split_batches, dataloader_config)
        self._handlers = collect_handlers(kwargs_handlers)
        group_options = self._handlers.init_process_group
        self.state = PartialState(cpu, **(group_options.to_kwargs() if group_options else {}))
        self.gradient_state = GradientState(
            resolve_accumulation(gradient_accumulation_steps, gradient_accumulation_plugin))
        self.device_placement = device_placement
        self.step_scheduler_with_optimizer = step_scheduler_with_optimizer
        # mixed precision (accel/_precision.py): argument + ACCEL_MIXED_PRECISION + handlers,
        # then the strategy, which receives it (accel_parallel: chosen by the registry)
        self._precision = resolve_precision(mixed_precision, self.state, self._handlers)
        plugins = resolve_plugins(fsdp_plugin, dynamo_backend=dynamo_backend,
                                  dynamo_plugin=dynamo_plugin, deepspeed_plugin=deepspeed_plugin,
                                  deepspeed_plugins=deepspeed_plugins,
                                  gradient_state=self.gradient_state,
                                  parallelism_config=parallelism_config,
                                  torch_tp_plugin=torch_tp_plugin)
        self._strategy = resolve_strategy(self.state, self._precision, self._handlers, plugins,
                                          strategy)
        # the shared view Accelerate's libraries read (accelerate.state.AcceleratorState)
        self.state = AcceleratorState._for_accelerator(self._strategy, plugins)
        self._models: list[torch.nn.Module] = []
        self._optimizers: list[AcceleratedOptimizer] = []
        self._schedulers: list[AcceleratedScheduler] = []
        self._dataloaders: list[Any] = []
        self._custom_objects: list[Any] = []
        self.step = 0
        # checkpoints (accel/_checkpoint_mixin.py): ProjectConfiguration, save/load hooks
        init_checkpointing(self, project_dir, project_config)
        # experiment tracking (accel/_tracking.py)
        _tracking.setup_tracking(self, log_with)

    @property
    def sync_gradients(self) -> bool:
        return self.gradient_state.sync_gradients

    @sync_gradients.setter
    def sync_gradients(self, sync: bool) -> None:
        self.gradient_state._set_sync_gradients(sync)

    @property
    def gradient_accumulation_steps(self) -> int:
        return self.gradient_state.num_steps

    @gradient_accumulation_steps.setter
    def gradient_accumulation_steps(self, steps: int) -> None:
        self.gradient_state.plugin_kwargs["num_steps"] = steps

    @property
    def is_fsdp2(self) -> bool:
        """Whether models are sharded with FSDP2 (accel's only FSDP): the strategy's
        ``shards_parameters``, asked, never its run type compared."""
        return self._strategy.shards_parameters

    @property
    def strategy(self) -> Strategy:
        """The Strategy object (single device, DDP, ...): it prepares objects, takes the
        steps and says the data-parallel topology and checkpoint format."""
        return self._strategy

    # -- prepare -----------------------------------------------------------------------------
    def prepare(self, *args: Any, device_placement: list[bool] | None = None) -> Any:
        """Prepare each object for the current setting and return them in the same order.

        Models, optimizers, schedulers and dataloaders of the call go to the strategy
        together (an engine initialises them as one); then optimizers and schedulers are
        wrapped and dataloaders sharded over the data-parallel replicas. Anything else is
        returned unchanged. One argument returns one object, several return a tuple.
        """
        if device_placement is None:
            device_placement = [self.device_placement] * len(args)
        elif len(device_placement) != len(args):
            raise ValueError(
                f"prepare() got {len(args)} objects but device_placement has "
                f"{len(device_placement)} entries; give one bool per object."
            )
        result = self._prepare_together(list(args), device_placement)
        return result[0] if len(result) == 1 else tuple(result)

    def _prepare_together(self, objects: list[Any], placement: list[bool],
                          evaluation_mode: bool = False, slice_fn_for_dispatch: Any = None,
                          ) -> list[Any]:
        """One strategy call for every object not prepared yet; results in the same order."""
        # read from the shared state, as Accelerate's prepare does: after
        # AcceleratorState._reset_state() this fails with the AttributeError that says so
        _ = self.state.distributed_type
        kinds: dict[str, list[int]] = {kind: [] for kind in _KINDS}
        for i, obj in enumerate(objects):
            kind = None if getattr(obj, "_is_accelerate_prepared", False) else _kind_of(obj)
            if kind is not None:
                kinds[kind].append(i)
        if not any(kinds.values()):
            return objects
        request = PrepareRequest(**{kind: [objects[i] for i in kinds[kind]] for kind in _KINDS},
                                 device_placement=[placement[i] for i in kinds["models"]],
                                 evaluation_mode=evaluation_mode,
                                 accumulation_steps=self.gradient_state.num_steps)
        refuse_dispatched_models(self, request.models)  # device_map="auto" + distributed
        prepared = self._strategy.prepare(request)
        _check_prepared(self._strategy, request, prepared)
        result = list(objects)
        for i, model in zip(kinds["models"], prepared.models, strict=True):
            result[i] = self._adopt_model(model)
        for i, optimizer in zip(kinds["optimizers"], prepared.optimizers, strict=True):
            result[i] = self._adopt_optimizer(optimizer, placement[i])
        for i, loader in zip(kinds["dataloaders"], prepared.dataloaders, strict=True):
            result[i] = self._shard_loader(loader, placement[i], slice_fn_for_dispatch)
            self._dataloaders.append(result[i])
        for i, scheduler in zip(kinds["schedulers"], prepared.schedulers, strict=True):
            result[i] = self._adopt_scheduler(scheduler)
        return result

    def _adopt_model(self, model: torch.nn.Module) -> torch.nn.Module:
        model._is_accelerate_prepared = True
        self._models.append(model)
        return model

    def _adopt_optimizer(self, optimizer: torch.optim.Optimizer,
                         placement: bool) -> AcceleratedOptimizer:
        prepared = AcceleratedOptimizer(optimizer, device_placement=placement,
                                        scaler=self._strategy.scaler, strategy=self._strategy,
                                        micro_step=self.gradient_state.micro_step)
        prepared._is_accelerate_prepared = True
        self._optimizers.append(prepared)
        return prepared

    def _adopt_scheduler(self, scheduler: Any) -> AcceleratedScheduler:
        own = [opt for opt in self._optimizers if opt.optimizer is scheduler.optimizer]
        prepared = AcceleratedScheduler(scheduler, own or self._optimizers,
                                        step_with_optimizer=self.step_scheduler_with_optimizer,
                                        split_batches=self.split_batches,
                                        num_processes=self._strategy.dp_size,
                                        strategy=self._strategy,
                                        micro_step=self.gradient_state.micro_step)
        prepared._is_accelerate_prepared = True
        self._schedulers.append(prepared)
        return prepared

    def prepare_model(self, model: torch.nn.Module, device_placement: bool | None = None,
                      evaluation_mode: bool = False) -> torch.nn.Module:
        placement = self.device_placement if device_placement is None else device_placement
        return self._prepare_together([model], [placement], evaluation_mode)[0]

    def prepare_optimizer(self, optimizer: torch.optim.Optimizer,
                          device_placement: bool | None = None) -> AcceleratedOptimizer:
        placement = self.device_placement if device_placement is None else device_placement
        return self._prepare_together([optimizer], [placement])[0]

    def prepare_scheduler(self, scheduler: Any) -> AcceleratedScheduler:
        return self._prepare_together([scheduler], [self.device_placement])[0]

    def prepare_data_loader(self, data_loader: torch.utils.data.DataLoader,
                            device_placement: bool | None = None,
                            slice_fn_for_dispatch: Any = None) -> Any:
        placement = self.device_placement if device_placement is None else device_placement
        return self._prepare_together([data_loader], [placement],
                                      slice_fn_for_dispatch=slice_fn_for_dispatch)[0]

    # -- training ----------------------------------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        """Pickles without the watchdog's beacon (a view of shared memory): an unpickled
        Accelerator attaches to its own process's beacon."""
        state = self.__dict__.copy()
        state.pop("_progress", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._progress = _attach_progress()

    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        """Use instead of ``loss.backward()``; the strategy divides, scales and routes it.

        With gradient accumulation the loss is divided by the number of accumulated batches,
        so the summed gradients are the mean over the large batch.
        """
        self._progress[0] += 1  # a step for the launcher's watchdog: no syscall
        if kwargs.get("learning_rate") is not None and self.has_lomo_optimizer:
            return self.lomo_backward(loss, kwargs["learning_rate"])  # accel/_lomo.py
        gradient_state = self.gradient_state
        self._strategy.backward(loss, accumulation_steps=gradient_state.num_steps,
                                micro_step=gradient_state.micro_step, **kwargs)

    def accumulate(self, *models: torch.nn.Module) -> contextlib.AbstractContextManager[Any]:
        """Accumulate gradients over ``gradient_accumulation_steps`` batches per optimizer step.

        Inside the block, prepared optimizers and schedulers step only on the last batch of
        each cycle (and on the last batch of the dataloader); on the other batches the
        strategy may defer the gradient reduction (DDP's ``no_sync``) unless the plugin's
        ``sync_each_batch`` is set.
        """
        return _Accumulation(self, models)

    def _do_sync(self) -> None:
        self.step = self.gradient_state._advance(self.step)

    def no_sync(self, model: torch.nn.Module) -> contextlib.AbstractContextManager[None]:
        """Skip the gradient all-reduce inside the block (local accumulation)."""
        return self._strategy.no_sync(model)

    def unwrap_model(self, model: torch.nn.Module, keep_fp32_wrapper: bool = True,
                     keep_torch_compile: bool = True) -> torch.nn.Module:
        """The user's module inside the strategy's wrappers (DDP, an engine, compile)."""
        return self._strategy.unwrap_model(model, keep_fp32_wrapper, keep_torch_compile)

    # -- end of training ---------------------------------------------------------------------
    def end_training(self) -> None:
        """Call once training is over: waits for asynchronous checkpoint writes, then
        finishes the trackers' runs."""
        self.wait_for_checkpoint()
        _tracking.end_tracking(self)

    def free_memory(self, *objects: Any) -> list[None]:
        """Forget every prepared object and free the device cache (between two trainings in
        one process): ``model, optimizer = accelerator.free_memory(model, optimizer)``."""
        self.wait_for_checkpoint()
        self._models, self._optimizers, self._schedulers, self._dataloaders = [], [], [], []
        self.step = 0
        return release_memory(*objects)

    def clear(self, *objects: Any) -> list[None]:
        """Alias of :meth:`free_memory`."""
        return self.free_memory(*objects)

    # -- saving ------------------------------------------------------------------------------
    def save(self, obj: Any, f: Any, safe_serialization: bool = False) -> None:
        """Save ``obj`` to ``f`` from the main process only (others return at once), or from
        each machine's with ``ProjectConfiguration(save_on_each_node=True)``.

        Written atomically (temporary file, then rename); ``safe_serialization=True`` writes a
        flat dict of tensors with safetensors.
        """
        from accel_checkpoint.weights import save as _save_object

        _save_object(obj, f, save_on_each_node=self.project_configuration.save_on_each_node,
                     safe_serialization=safe_serialization)

class _Accumulation:
    """The context of one ``accumulate()`` batch: a class rather than a generator, since it
    runs on every micro-step (hot path)."""

    __slots__ = ("accelerator", "models", "context")

    def __init__(self, accelerator: Accelerator, models: tuple[torch.nn.Module, ...]) -> None:
        self.accelerator, self.models = accelerator, models
        self.context: Any = None

    def __enter__(self) -> Any:
        accelerator = self.accelerator
        state = accelerator.gradient_state
        accelerator.step = state._advance(accelerator.step)
        context = accelerator._strategy.accumulation_context(self.models, state.micro_step)
        if context is NO_CONTEXT:  # nothing to defer: not entered (two calls per micro-step)
            return None
        self.context = context
        return context.__enter__()

    def __exit__(self, *exc_info: Any) -> Any:
        context = self.context
        return None if context is None else context.__exit__(*exc_info)


#: The kinds of objects ``prepare`` hands to the strategy (``PrepareRequest`` fields).
_KINDS = ("models", "optimizers", "schedulers", "dataloaders")


def _check_prepared(strategy: Strategy, request: PrepareRequest, prepared: Any) -> None:
    """A strategy returns one prepared object per object it was given, kind by kind."""
    for kind in _KINDS:
        given, got = len(getattr(request, kind)), len(getattr(prepared, kind, ()))
        if given != got:
            raise TypeError(
                f"{type(strategy).__name__}.prepare returned {got} {kind} for the {given} it "
                "was given; a strategy returns one prepared object per object, in order.")


def _kind_of(obj: Any) -> str | None:
    if isinstance(obj, torch.nn.Module):
        return "models"
    if isinstance(obj, torch.optim.Optimizer):
        return "optimizers"
    if isinstance(obj, torch.utils.data.DataLoader):
        return "dataloaders"
    if isinstance(obj, torch.optim.lr_scheduler.LRScheduler):
        return "schedulers"
    return None
