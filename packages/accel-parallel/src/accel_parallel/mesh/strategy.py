"""The mesh strategy: every parallelism that lives on the run's one named DeviceMesh
(FSDP2 / HSDP, DDP, TP (+SP), CP), applied in one order, and its two subclasses.

:class:`MeshStrategy` builds the mesh once from resolved sizes and sends every model down
one straight line (:meth:`MeshStrategy.prepare_model`):

1. **tensor parallelism** over ``tp`` (``parallelize_module`` with the user's plan or the
   model's own; ``sequence_parallel`` entries shard norms/dropout over the sequence), then
   the weights TP left whole are made equal on every rank;
2. **activation checkpointing** (the FSDP plugin's ``activation_checkpointing``);
3. **compile** (the ``TorchDynamoPlugin``, in place);
4. **the data-parallel step the mesh asks for** (:class:`DataParallelStep`): FSDP2 over
   ``dp_shard`` (``dp_shard_cp`` with CP), HSDP over ``dp_replicate`` × ``dp_shard``,
   FSDP2 replicating over ``dp_replicate`` × a shard dimension of size 1 (TP/CP with
   replicas), DDP when replicas are all there is, or nothing.

How the sizes are resolved and which data-parallel step they make live in
:mod:`accel_parallel.mesh.sizes` (re-exported here). The two subclasses differ only in where
the sizes come from: :class:`ParallelismStrategy` (``nd``)
from a ``ParallelismConfig`` (``Accelerator(parallelism_config=...)``,
``ACCELERATE_USE_PARALLELISM_CONFIG``) or Accelerate's deprecated
``TorchTensorParallelPlugin``; :class:`~accel_parallel.fsdp.strategy.FSDP2Strategy` (``fsdp``) from
an FSDP plugin's sharding strategy. Batches are sharded over the flattened ``dp`` dimension
only, so the ranks of one TP/CP group read the same batches.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import torch
from accel_state import ConfigurationError, DistributedType

from accel_parallel.choosing import distributed_unmet
from accel_parallel.ddp import (
    DistributedDataParallelKwargs,
    join_ddp,
    sync_ddp_in_backward,
    wrap_ddp,
)
from accel_parallel.fsdp.sharding import (
    adapt_precision,
    apply_activation_checkpointing,
    broadcast_from_main,
    ensure_process_group,
    shard_model,
    weights_to_broadcast,
    with_gradient_sync,
    without_gradient_sync,
)
from accel_parallel.mesh.device_mesh import BuiltMesh, build_mesh
from accel_parallel.mesh.parallelism_config import ParallelismConfig
from accel_parallel.mesh.sequence_parallel import (
    apply_sequence_parallel,
    shard_for_sequence_parallel,
)
from accel_parallel.mesh.sizes import DataParallelStep, check_plugin_agrees, resolve_parallelism
from accel_parallel.plugins import conflicts
from accel_parallel.strategy import Strategy
from accel_parallel.unwrap import is_sharded_model

if TYPE_CHECKING:
    from accel_precision import Precision
    from accel_state import PartialState

    from accel_parallel.fsdp.plugin import FullyShardedDataParallelPlugin
    from accel_parallel.selection import StrategyConfig

__all__ = ["DataParallelStep", "MeshStrategy", "ParallelismStrategy", "resolve_parallelism"]


class MeshStrategy(Strategy):
    """Every parallelism of one named DeviceMesh, applied to each model in one order.

    Args:
        parallelism: the resolved sizes (spanning the world).
        plugin: the FSDP plugin (wrap policy, activation checkpointing, offload, ...);
            a default one when not given.
        sharding: whether the run is an FSDP run (Accelerate's ``DistributedType.FSDP``):
            an FSDP plugin was given or the sizes shard.
        ddp_kwargs: ``DistributedDataParallelKwargs`` for the DDP step.
    """

    name = "mesh"

    def __init__(self, state: PartialState, *, precision: Precision | None = None,
                 parallelism: ParallelismConfig,
                 plugin: FullyShardedDataParallelPlugin | None = None, sharding: bool = True,
                 ddp_kwargs: Any = None, **options: Any) -> None:
        super().__init__(state, precision=precision, **options)
        if plugin is None:
            from accel_parallel.fsdp.plugin import FullyShardedDataParallelPlugin

            plugin = FullyShardedDataParallelPlugin()
        self.plugin = plugin
        adapt_precision(self.precision)
        plugin.validate_cpu_offload(state.device)
        self.parallelism = parallelism
        self._sharding = sharding
        #: the data-parallel step every model ends with
        self.data_parallel = DataParallelStep.for_mesh(parallelism, sharding=sharding)
        self.ddp_kwargs = ddp_kwargs
        self._mesh = self._build_mesh()
        #: the run's one named DeviceMesh (Accelerate's ``torch_device_mesh``)
        self.mesh = self._mesh.mesh
        #: ids of the models inside :meth:`no_sync` now (for :meth:`sync_in_backward`)
        self._unsynced: set[int] = set()

    @property
    def plugins_in_use(self) -> dict[str, Any]:
        return {"fsdp": self.plugin} if self._sharding else {}

    @property
    def shards_parameters(self) -> bool:
        """True when FSDP2 shards (a plugin was given or the sizes shard); FSDP2 only
        replicating a TP/CP model, or DDP, leaves whole parameters on each replica."""
        return self._sharding

    # -- topology ------------------------------------------------------------------------------
    def _build_mesh(self) -> BuiltMesh:
        """FSDP2 always shards over ``dp_shard`` (kept at size 1 when it only replicates);
        one process with nothing to split gets a mesh of itself."""
        device = self.state.device.type
        keep = ("dp_shard",) if self.data_parallel.uses_fsdp2 else ()
        built = build_mesh(self.parallelism, device, keep=keep)
        if built is None:
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
        """FSDP when parameters are sharded (or an FSDP plugin was given), else the
        device's multi-process type (Accelerate: TP runs as ``MULTI_GPU``)."""
        return DistributedType.FSDP if self._sharding else self.state.distributed_type

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

    # -- models: one order for every mesh --------------------------------------------------------
    def prepare_model(self, model: torch.nn.Module, *, device_placement: bool = True,
                      evaluation_mode: bool = False) -> torch.nn.Module:
        """Convert layers for the precision and move; then, in this order for every mesh:
        :meth:`parallelize` (TP), activation checkpointing if asked, compile (in place), and
        :meth:`apply_data_parallel`. A model already sharded by the user is left as it is."""
        model = self.precision.convert_module(model)
        on_meta = any(t.is_meta for t in (*model.parameters(), *model.buffers()))
        if device_placement and not on_meta:
            model = model.to(self.state.device)
        if is_sharded_model(model) or not any(True for _ in model.parameters()):
            return model
        source = weights_to_broadcast(model, self.plugin, on_meta, self.state.is_main_process)
        self.parallelize(model)
        if source is None and self.parallelism.non_data_parallel_size > 1:
            self.broadcast_unsharded(model)  # the TP ranks compute the whole weights redundantly
        targets = self.plugin.modules_to_shard(model)
        if self.plugin.activation_checkpointing:
            apply_activation_checkpointing(targets or [model])
        model = self.compile_model(model, in_place=True)
        model = self.apply_data_parallel(model, targets, evaluation_mode=evaluation_mode)
        if on_meta:
            model.to_empty(device=self.state.device)  # allocate this rank's shards only
        if source is not None:
            broadcast_from_main(model, source)
        return model

    def broadcast_unsharded(self, model: torch.nn.Module) -> None:
        """Make the weights TP left whole equal everywhere: rank 0's, over every process
        (the pipeline strategy narrows it to the ranks of one pipeline position)."""
        from accel_parallel.mesh.tensor_parallel import broadcast_unsharded

        broadcast_unsharded(model)

    def parallelize(self, model: torch.nn.Module) -> None:
        """Step 1: tensor parallelism over ``tp``, then Ulysses over ``sp``: the core
        attention exchanges sequence for heads (each a no-op at size 1)."""
        config = self.parallelism
        if config.tp_enabled:
            from accel_parallel.mesh.tensor_parallel import apply_tensor_parallel

            handler = config.tp_handler
            apply_tensor_parallel(model, self._mesh.submesh("tp"),
                                  plan=getattr(handler, "tp_plan", None),
                                  enable_async_tp=bool(getattr(handler, "enable_async_tp",
                                                               False)))
        apply_sequence_parallel(model, self._mesh, config)

    def prepare_data_loader(self, dataloader: Any) -> Any:
        """With ``sp_size > 1``, a loader whose batches are this rank's sequence shards."""
        return shard_for_sequence_parallel(dataloader, self._mesh, self.parallelism)

    def apply_data_parallel(self, model: torch.nn.Module, targets: list[torch.nn.Module], *,
                            evaluation_mode: bool = False) -> torch.nn.Module:
        """The last step, as :attr:`data_parallel` says. FSDP2 takes the precision as dtypes
        (no autocast on top); the others run forward under the precision's autocast, and
        DDP wraps only a model with gradients to reduce (never for evaluation)."""
        if self.data_parallel.uses_fsdp2:
            shard_model(model, targets, self.plugin, self.precision, self.fsdp_mesh)
            return model
        model = self.precision.wrap_forward(model)
        if (self.data_parallel is DataParallelStep.DDP and not evaluation_mode
                and any(p.requires_grad for p in model.parameters())):
            return wrap_ddp(model, self.ddp_kwargs, process_group=self._mesh.dp_group)
        return model

    # -- the step ------------------------------------------------------------------------------
    def no_sync(self, model: torch.nn.Module) -> contextlib.AbstractContextManager[None]:
        """Keep gradients unreduced on accumulation micro-steps (DDP's ``no_sync``; FSDP2's
        gradients also stay unsharded)."""
        if isinstance(model, torch.nn.parallel.DistributedDataParallel):
            return model.no_sync()
        if hasattr(model, "set_requires_gradient_sync"):
            return without_gradient_sync(model, self._unsynced)
        return super().no_sync(model)

    def sync_in_backward(self, model: torch.nn.Module) -> contextlib.AbstractContextManager[None]:
        """Inside :meth:`no_sync`, the backward run in this block reduces the gradients
        accumulated so far (FSDP2 decides at backward time, DDP is re-armed)."""
        if isinstance(model, torch.nn.parallel.DistributedDataParallel):
            return sync_ddp_in_backward(model)
        if id(model) in self._unsynced:
            return with_gradient_sync(model)
        return super().sync_in_backward(model)

    def join(self, joinables: list[Any], *,
             enable: bool) -> contextlib.AbstractContextManager[Any] | None:
        """torch's ``Join`` when the data-parallel step is DDP (FSDP2 has none)."""
        if self.data_parallel is DataParallelStep.DDP:
            return join_ddp(joinables, enable=enable)
        return super().join(joinables, enable=enable)

    def clip_grad_norm_(self, parameters: Any, max_norm: float,
                        norm_type: float = 2) -> torch.Tensor:
        """The norm of the whole gradient across every mesh its pieces live on (TP weights
        on ``tp``/2-D, the rest on ``dp_shard``), then clipped; a plain tensor."""
        from accel_parallel.mesh.tensor_parallel import clip_grad_norm_

        return clip_grad_norm_(parameters, max_norm, norm_type)

    def context_parallel(self, buffers: Any = None, buffer_seq_dims: Any = None,
                         no_restore_buffers: Any = None) -> contextlib.AbstractContextManager[Any]:
        """Context parallelism over ``cp`` for the block (a no-op when ``cp_size`` is 1)."""
        config = self.parallelism
        if not config.cp_enabled:
            return contextlib.nullcontext()
        from accel_parallel.mesh.context_parallel import context_parallel_block

        return context_parallel_block(self._mesh.submesh("cp"), buffers, buffer_seq_dims,
                                      no_restore_buffers, config.cp_handler.cp_comm_strategy)


class ParallelismStrategy(MeshStrategy):
    """The mesh strategy sized by a ``ParallelismConfig`` (or a ``TorchTensorParallelPlugin``)."""

    name = "nd"
    priority = 55  # below deepspeed (60): a DeepSpeed plugin with a ParallelismConfig is ZeRO
    handler_kinds = {"ddp": DistributedDataParallelKwargs}  # for its DDP data parallelism
    plugin_kinds = frozenset({"parallelism_config", "tp", "fsdp"})
    options_class, options_plugin = ParallelismConfig, "parallelism_config"  # options by data

    def __init__(self, state: PartialState, *, precision: Precision | None = None,
                 parallelism: ParallelismConfig | None = None,
                 plugin: FullyShardedDataParallelPlugin | None = None,
                 tp_plugin: Any = None, ddp_kwargs: Any = None, **options: Any) -> None:
        from accel_parallel.mesh.context_parallel import check_context_parallel_device

        if parallelism is not None:  # the device first: no size makes CP run on a CPU
            check_context_parallel_device(parallelism.cp_size, state.device)
        config = resolve_parallelism(parallelism, tp_plugin, state.num_processes, plugin)
        check_plugin_agrees(config, plugin)
        super().__init__(state, precision=precision, parallelism=config, plugin=plugin,
                         sharding=plugin is not None or config.fsdp_enabled,
                         ddp_kwargs=ddp_kwargs, **options)

    @classmethod
    def claims(cls, config: StrategyConfig) -> bool:
        plugins = config.plugins
        wanted = plugins.get("parallelism_config") is not None or plugins.get("tp") is not None
        return wanted and not conflicts("parallelism_config", plugins)

    @classmethod
    def check(cls, config: StrategyConfig, environment: Any) -> list[Any]:
        return distributed_unmet("a device mesh")

    @classmethod
    def from_config(cls, config: StrategyConfig) -> ParallelismStrategy:
        ensure_process_group(config.state)
        plugins = config.plugins
        return cls(config.state, precision=config.precision,
                   parallelism=plugins.get("parallelism_config"), plugin=plugins.get("fsdp"),
                   tp_plugin=plugins.get("tp"), ddp_kwargs=config.handlers.get("ddp"))

    @property
    def plugins_in_use(self) -> dict[str, Any]:
        """The mesh's config, and the FSDP2 plugin when the run is an FSDP run (as
        :attr:`distributed_type` says: sharding asked for; FSDP2 only replicating for TP/CP
        is an implementation detail of data parallelism)."""
        return {"parallelism_config": self.parallelism, **super().plugins_in_use}

    @property
    def parallelism_config(self) -> ParallelismConfig:
        return self.parallelism
