"""Fully sharded data parallelism with FSDP2 (``torch.distributed.fsdp.fully_shard``).

Chosen when the configuration holds a :class:`FullyShardedDataParallelPlugin`
(``Accelerator(fsdp_plugin=...)`` or ``ACCELERATE_USE_FSDP=true`` with ``FSDP_*``
variables), and the FSDP step of the N-D strategy (:mod:`accel_parallel.nd`). Parameters
become DTensors sharded over the ``dp_shard`` dimension of the run's one mesh
(:mod:`accel_parallel.mesh`), or over ``dp_replicate`` × ``dp_shard`` for hybrid sharding
and ``NO_SHARD`` (a shard dimension of size 1). The model goes through the strategy's one
order of steps: parallelize (TP, in the N-D strategy), activation checkpointing, compile,
``fully_shard``. The precision is handed to FSDP2 as dtypes (``MixedPrecisionPolicy``:
parameters in the low dtype for compute, gradients reduced in fp32, outputs fp32), so a
bf16 FSDP2 run does not also autocast. Checkpoints are sharded (DCP, every rank its
shards), which the base :meth:`Strategy.checkpoint_format` already says for DTensor models.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import torch
from accel_state import ConfigurationError, DistributedType
from accel_state.imports import is_torch_version

from accel_parallel.mesh import BuiltMesh, build_mesh
from accel_parallel.strategy import Strategy
from accel_parallel.torch_fsdp import fsdp2
from accel_parallel.unwrap import is_sharded_model

if TYPE_CHECKING:
    from accel_precision import Precision
    from accel_state import PartialState

    from accel_parallel.fsdp_plugin import FullyShardedDataParallelPlugin
    from accel_parallel.parallelism_config import ParallelismConfig
    from accel_parallel.selection import StrategyConfig

__all__ = ["FSDP2Strategy", "CheckpointedForward", "apply_activation_checkpointing",
           "plugin_parallelism"]


class CheckpointedForward:
    """A module's forward recomputed in backward (activation checkpointing).

    The forward is replaced in place rather than wrapped in another module, so parameter
    names (and so optimizers, checkpoints and sharding plans) do not change.
    """

    def __init__(self, forward: Callable[..., Any]) -> None:
        self.forward = forward
        functools.update_wrapper(self, forward)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from torch.utils.checkpoint import checkpoint

        return checkpoint(self.forward, *args, use_reentrant=False, **kwargs)


class FSDP2Strategy(Strategy):
    """Shard parameters, gradients and optimizer state over the processes with FSDP2."""

    name = "fsdp"
    priority = 50

    def __init__(self, state: PartialState, *, precision: Precision | None = None,
                 plugin: FullyShardedDataParallelPlugin | None = None,
                 parallelism: ParallelismConfig | None = None, **options: Any) -> None:
        super().__init__(state, precision=precision, **options)
        if plugin is None:
            from accel_parallel.fsdp_plugin import FullyShardedDataParallelPlugin

            plugin = FullyShardedDataParallelPlugin()
        self.plugin = plugin
        _adapt_precision(self.precision)
        plugin.validate_cpu_offload(state.device)
        #: the resolved sizes of the mesh (given, or implied by the plugin's strategy)
        self.parallelism = parallelism if parallelism is not None else self._plugin_sizes()
        self._mesh = self._build_mesh()
        #: the run's one named DeviceMesh (Accelerate's ``torch_device_mesh``)
        self.mesh = self._mesh.mesh
        #: ids of the models inside :meth:`no_sync` now (for :meth:`sync_in_backward`)
        self._unsynced: set[int] = set()

    # -- selection -----------------------------------------------------------------------------
    @classmethod
    def accepts(cls, config: StrategyConfig) -> bool:
        return config.plugins.get("fsdp") is not None

    @classmethod
    def from_config(cls, config: StrategyConfig) -> FSDP2Strategy:
        _ensure_process_group(config.state)
        return cls(config.state, precision=config.precision, plugin=config.plugins.get("fsdp"))

    @property
    def plugins_in_use(self) -> dict[str, Any]:
        return {"fsdp": self.plugin}

    # -- topology ------------------------------------------------------------------------------
    def _plugin_sizes(self) -> ParallelismConfig:
        return plugin_parallelism(self.plugin, self.state.num_processes)

    def _kept_dims(self) -> tuple[str, ...]:
        """Mesh dimensions kept at size 1: FSDP2 always shards over ``dp_shard``."""
        return ("dp_shard",)

    def _build_mesh(self) -> BuiltMesh:
        device = self.state.device.type
        built = build_mesh(self.parallelism, device, keep=self._kept_dims())
        if built is None:  # one process, nothing to split: a mesh of this process
            built = build_mesh(self.parallelism, device, keep=("dp_replicate",))
        if built is None:
            raise ConfigurationError("internal: no device mesh could be built")
        self.parallelism._built, self.parallelism.device_mesh = built, built.mesh
        return built

    @property
    def fsdp_mesh(self) -> Any:
        """The (sub)mesh ``fully_shard`` gets: ``dp_shard`` (with ``cp`` folded in when
        context parallelism is on), preceded by ``dp_replicate`` for hybrid sharding."""
        names = self._mesh.names
        shard = "dp_shard_cp" if "cp" in names or "sp" in names else "dp_shard"
        return self._mesh.submesh(("dp_replicate", shard) if "dp_replicate" in names
                                  else shard)

    @property
    def device_mesh(self) -> Any:
        return self.mesh

    @property
    def distributed_type(self) -> DistributedType:
        return DistributedType.FSDP

    @property
    def dp_size(self) -> int:
        return self._mesh.dp_size

    @property
    def dp_rank(self) -> int:
        return self._mesh.dp_rank

    @property
    def dp_group(self) -> Any:
        """None (every process) unless other dimensions (TP, CP) share the batches."""
        return None if self.dp_size == self.state.num_processes else self._mesh.dp_group

    @property
    def parallel_sizes(self) -> dict[str, int]:
        """Read from the mesh built at construction (a 1-D mesh has no replicas)."""
        return {"dp_replicate": 1, **self._mesh.sizes}

    @property
    def parallel_ranks(self) -> dict[str, int]:
        return {"dp_replicate": 0, **self._mesh.coordinate}

    # -- models --------------------------------------------------------------------------------
    def _mixed_precision_policy(self, root: bool) -> Any:
        """The plugin's policy, else the precision's dtypes. Only the root unit returns fp32
        outputs (as autocast's fp32 outputs): inner units hand low-precision activations on
        to the modules of their parent, whose parameters are in that dtype."""
        if self.plugin.mixed_precision_policy is not None:
            return self.plugin.mixed_precision_policy
        param_dtype = self.precision.param_dtype
        if param_dtype is None:
            return fsdp2().MixedPrecisionPolicy()
        return fsdp2().MixedPrecisionPolicy(
            param_dtype=param_dtype, reduce_dtype=self.precision.reduce_dtype,
            output_dtype=torch.float32 if root else None)

    def _shard_options(self, root: bool) -> dict[str, Any]:
        """``fully_shard`` arguments. The root unit is never resharded after forward (as
        torch's own default does): backward starts with it, so it would be gathered again
        at once; the plugin's ``reshard_after_forward`` applies to every inner unit."""
        reshard = self.plugin.reshard_after_forward and not root
        options: dict[str, Any] = {"mesh": self.fsdp_mesh, "reshard_after_forward": reshard,
                                   "mp_policy": self._mixed_precision_policy(root)}
        if self.plugin.cpu_offload:
            options["offload_policy"] = fsdp2().CPUOffloadPolicy()
        return options

    def prepare_model(self, model: torch.nn.Module, *, device_placement: bool = True,
                      evaluation_mode: bool = False) -> torch.nn.Module:
        """Convert layers for the precision and move; then, in this order: parallelize
        (:meth:`parallelize`: TP in the N-D strategy), checkpoint activations if asked,
        compile (in place), and ``fully_shard`` the plugin's wrap targets bottom-up and the
        model last."""
        model = self.precision.convert_module(model)
        on_meta = any(t.is_meta for t in (*model.parameters(), *model.buffers()))
        if device_placement and not on_meta:
            model = model.to(self.state.device)
        if is_sharded_model(model) or not any(True for _ in model.parameters()):
            return model  # sharded by the user, or nothing to shard
        source = self._weights_to_broadcast(model, on_meta)
        self.parallelize(model)
        targets = self.plugin.modules_to_shard(model)
        if self.plugin.activation_checkpointing:
            apply_activation_checkpointing(targets or [model])
        model = self.compile_model(model, in_place=True)
        self.apply_fsdp(model, targets)
        if on_meta:
            model.to_empty(device=self.state.device)  # allocate this rank's shards only
        if source is not None:
            _broadcast_from_main(model, source)
        return model

    def parallelize(self, model: torch.nn.Module) -> None:
        """The step before activation checkpointing: split the model within a data-parallel
        replica (nothing here; tensor parallelism in the N-D strategy)."""

    def apply_fsdp(self, model: torch.nn.Module, targets: list[torch.nn.Module]) -> None:
        """``fully_shard`` each wrap target (children first), then the model, over
        :attr:`fsdp_mesh`."""
        ignored = self.plugin.ignored_params(model)
        extra = {"ignored_params": ignored} if ignored else {}
        fully_shard = fsdp2().fully_shard
        root = getattr(model, "_orig_mod", model)  # a compile wrapper shares the module
        for module in targets:
            fully_shard(module, **self._shard_options(root=False), **extra)
        fully_shard(root, **self._shard_options(root=True), **extra)

    def _weights_to_broadcast(self, model: torch.nn.Module, on_meta: bool) -> dict | None:
        """With ``sync_module_states`` (implied by ``cpu_ram_efficient_loading``) the main
        process's weights are broadcast into every rank's shards after sharding; the other
        ranks may have built the model on the meta device (no memory for the weights).
        Returns the main process's full state dict (``{}`` elsewhere), or None."""
        if not (self.plugin.sync_module_states or on_meta):
            return None
        if on_meta and not self.plugin.sync_module_states:
            raise ConfigurationError(
                "A model on the meta device has no weights to shard: set "
                "FullyShardedDataParallelPlugin(sync_module_states=True) (or "
                "cpu_ram_efficient_loading=True) so they are broadcast from the main process.")
        if on_meta and self.state.is_main_process:
            raise ConfigurationError(
                "The main process's model is on the meta device: with "
                "cpu_ram_efficient_loading / sync_module_states the weights come from the main "
                "process, so load them there (the other processes may use the meta device).")
        return model.state_dict() if self.state.is_main_process else {}

    # -- the step ------------------------------------------------------------------------------
    def no_sync(self, model: torch.nn.Module) -> contextlib.AbstractContextManager[None]:
        """Keep gradients unreduced (and unsharded) on accumulation micro-steps."""
        if hasattr(model, "set_requires_gradient_sync"):
            return _without_gradient_sync(model, self._unsynced)
        return super().no_sync(model)

    def sync_in_backward(self, model: torch.nn.Module) -> contextlib.AbstractContextManager[None]:
        """FSDP2 decides at backward time: inside :meth:`no_sync`, the backward run in this
        block reduce-scatters the gradients accumulated so far (outside it already does)."""
        if id(model) in self._unsynced:
            return _with_gradient_sync(model)
        return super().sync_in_backward(model)

    def clip_grad_norm_(self, parameters: Any, max_norm: float,
                        norm_type: float = 2) -> torch.Tensor:
        """Clip by the norm of the whole (sharded) gradient; returns it as a plain tensor."""
        norm = torch.nn.utils.clip_grad_norm_(parameters, max_norm, norm_type=norm_type)
        full_tensor = getattr(norm, "full_tensor", None)
        return full_tensor() if full_tensor is not None else norm


def _adapt_precision(precision: Precision) -> None:
    """Tell the precision its parameters are sharded (:meth:`Precision.adapt_to_sharding`).

    Loss scaling must agree over every process, as each rank sees inf/nan in its own
    gradient shards only: a scaling precision without that hook is an error, and so is a
    torch whose GradScaler cannot unscale DTensor gradients (before 2.5)."""
    if precision.scaler is not None:
        if is_torch_version("<", "2.5"):
            raise ConfigurationError(
                f"mixed_precision={precision.name!r} with FSDP2 needs torch>=2.5, whose "
                f"GradScaler unscales DTensor gradients; this is torch {torch.__version__}. "
                "Upgrade torch, or use mixed_precision='bf16' (no loss scaling).")
        if not precision.overrides("adapt_to_sharding"):
            raise ConfigurationError(
                f"mixed_precision={precision.name!r} scales the loss, and its precision class "
                f"{type(precision).__name__} cannot share its inf/nan check across FSDP2's "
                "shards (it does not override adapt_to_sharding); use mixed_precision='bf16' "
                "or 'fp16' with FSDP.")
    precision.adapt_to_sharding()


def plugin_parallelism(plugin: FullyShardedDataParallelPlugin, world: int
                       ) -> ParallelismConfig:
    """The mesh sizes an FSDP plugin's strategy implies without a ParallelismConfig:
    replicate over machines and shard within one (hybrid), replicate only (NO_SHARD) or
    shard over every process."""
    from accel_parallel.parallelism_config import ParallelismConfig

    replicate, shard = 1, world
    if plugin.replicate_only:
        replicate, shard = world, 1
    elif plugin.hybrid:
        local = _local_world(world)
        if world % local:
            raise ConfigurationError(
                f"Hybrid sharding shards within a machine: {world} processes do not split "
                f"into machines of {local}; use FULL_SHARD, or the same number of "
                "processes on every machine.")
        replicate, shard = world // local, local
    return ParallelismConfig(dp_replicate_size=replicate, dp_shard_size=shard, tp_size=1,
                             cp_size=1, sp_size=1)


def apply_activation_checkpointing(modules: list[torch.nn.Module]) -> None:
    """Recompute each module's activations in backward (its forward replaced in place)."""
    for module in modules:
        if not isinstance(module.forward, CheckpointedForward):
            module.forward = CheckpointedForward(module.forward)


def _ensure_process_group(state: PartialState) -> None:
    """FSDP2 runs on a process group; a single process gets one of its own (an in-memory
    store, nothing to connect to), so a sharded checkpoint of N processes loads into one."""
    import torch.distributed as dist

    if not dist.is_available():
        raise ConfigurationError(
            "FSDP needs torch.distributed, which this torch build lacks: install a torch build "
            "with distributed support, or drop the FSDP plugin.")
    if dist.is_initialized():
        return
    from accel_state.detect import backend_for_device

    dist.init_process_group(backend_for_device(state.device.type), store=dist.HashStore(),
                            rank=0, world_size=1)


def _broadcast_from_main(model: torch.nn.Module, full_state: dict) -> None:
    """Fill every rank's shards (and buffers) from the main process's full state dict."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    set_model_state_dict(model, full_state, options=StateDictOptions(
        full_state_dict=True, broadcast_from_rank0=True))


@contextlib.contextmanager
def _without_gradient_sync(model: Any, unsynced: set[int]) -> Iterator[None]:
    model.set_requires_gradient_sync(False)
    unsynced.add(id(model))
    try:
        yield
    finally:
        unsynced.discard(id(model))
        model.set_requires_gradient_sync(True)


@contextlib.contextmanager
def _with_gradient_sync(model: Any) -> Iterator[None]:
    """Inside ``no_sync``: reduce gradients for this block, then defer again."""
    model.set_requires_gradient_sync(True)
    try:
        yield
    finally:
        model.set_requires_gradient_sync(False)


def _local_world(world: int) -> int:
    """Processes on this machine (``LOCAL_WORLD_SIZE``), else every process."""
    from accel_state import env

    return env.LOCAL_WORLD_SIZE.get_int(world) or world
