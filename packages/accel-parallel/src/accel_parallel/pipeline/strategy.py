"""The pipeline-parallel mesh strategy (``ParallelismConfig(pp_size > 1)``).

The mesh strategy with one more, outermost dimension, ``pp``. Each model is split into
stages (:mod:`accel_parallel.pipeline.split`); each stage of this rank then goes through the
mesh strategy's own order (TP, activation checkpointing, compile, data parallelism over
the ``dp`` dimensions of its pipeline position), and a torch schedule runs them
(:class:`~accel_parallel.pipeline.model.PipelinedModel`). Data parallelism next to a
pipeline is always FSDP2 (sharding, or replication over ``dp_replicate``): torch's
schedules defer and finish FSDP2's gradient reduction themselves, which DDP does not allow
with several forwards in flight.

The step: the prepared model's call runs forward and backward of the whole pipeline and
returns the loss; :meth:`PipelineStrategy.backward` accepts that loss once and refuses any
other. Under ``torch.no_grad()``, in ``eval()`` mode or prepared with ``evaluation_mode=True``
the call runs forward only (:mod:`accel_parallel.pipeline.evaluate`). Gradient accumulation
is the micro-batches (``num_microbatches``), so ``gradient_accumulation_steps > 1`` is
refused, as is a loss-scaling precision (fp16), whose scaler the schedule's backward would
not apply.
"""

from __future__ import annotations

import copy
import weakref
from typing import TYPE_CHECKING, Any

import torch
from accel_state import ConfigurationError
from accel_state.imports import is_torch_version

from accel_parallel.choosing import Unmet
from accel_parallel.mesh.strategy import DataParallelStep, ParallelismStrategy
from accel_parallel.pipeline.model import PipelinedModel, PipelineTopology
from accel_parallel.pipeline.split import build_shell, merge_shells, plan_stages

if TYPE_CHECKING:
    from accel_parallel.selection import StrategyConfig
    from accel_parallel.strategy import PrepareRequest

__all__ = ["PipelineStrategy"]

#: what the facade passes to every ``Strategy.backward`` besides the user's arguments
_STEP_INFO = frozenset({"sync_gradients", "micro_step"})


class PipelineStrategy(ParallelismStrategy):
    """Pipeline stages over ``pp``, composed with FSDP2 / TP on the other dimensions."""

    name = "pipeline"
    priority = 56  # above nd (55): a ParallelismConfig with pp_size > 1 is a pipeline

    def __init__(self, state: Any, **options: Any) -> None:
        if is_torch_version("<", "2.6"):
            raise ConfigurationError(
                f"Pipeline-parallel training needs torch>=2.6 (its pipeline stages infer "
                f"their shapes at the first step); this is torch {torch.__version__}. Upgrade "
                "torch, or set pp_size=1.")
        super().__init__(state, **options)
        if self.precision.scaler is not None:
            raise ConfigurationError(
                f"mixed_precision={self.precision.name!r} scales the loss, which the pipeline "
                "schedule's own backward does not do; use mixed_precision='bf16' (or 'no') "
                "with pp_size > 1.")
        # The mesh strategy broadcasts the main process's weights (``sync_module_states``);
        # a stage's weights come from its own first data-parallel replica instead.
        self._sync_stages = bool(self.plugin.sync_module_states)
        self.plugin = copy.copy(self.plugin)
        self.plugin.sync_module_states = False
        self._pipelines: list[PipelinedModel] = []
        self._position: Any = None
        #: id -> weak reference of the parameters other ranks' stages hold (pruned from
        #: optimizers); weak, so the user's full model can still be freed
        self._foreign: dict[int, weakref.ref[torch.nn.Parameter]] = {}
        #: id -> name in the whole model of every prepared model's parameters, and
        #: id(optimizer) -> its groups' names (checkpoints name the whole model's groups)
        self._names: dict[int, str] = {}
        self._whole_groups: dict[int, list[list[str]]] = {}

    @classmethod
    def check(cls, config: StrategyConfig, environment: Any) -> list[Unmet]:
        if is_torch_version("<", "2.6"):
            return [Unmet(f"pipeline stages need torch>=2.6 (they infer their shapes at the "
                          f"first step); this is torch {torch.__version__}",
                          "upgrade torch, or set pp_size=1")]
        return super().check(config, environment)

    @classmethod
    def claims(cls, config: StrategyConfig) -> bool:
        parallelism = config.plugins.get("parallelism_config")
        return (super().claims(config) and parallelism is not None
                and getattr(parallelism, "pp_size", 1) > 1)

    def _build_mesh(self) -> Any:
        """DP next to a pipeline is FSDP2 replication, never DDP (see the module docstring)."""
        if self.data_parallel is DataParallelStep.DDP:
            self.data_parallel = DataParallelStep.REPLICATE
        return super()._build_mesh()

    @property
    def topology(self) -> PipelineTopology:
        config = self.parallelism
        return PipelineTopology(self._mesh.submesh("pp").get_group(), self._mesh.rank("pp"),
                                config.pp_size, config.pp_handler.stages(config.pp_size))

    # -- prepare -------------------------------------------------------------------------------
    def prepare(self, request: PrepareRequest) -> PrepareRequest:
        if request.models and request.accumulation_steps > 1:
            raise ConfigurationError(
                f"gradient_accumulation_steps={request.accumulation_steps} with pp_size > 1: "
                "the pipeline already accumulates over its micro-batches; set "
                "gradient_accumulation_steps=1 and PipelineParallelConfig(num_microbatches=...) "
                "(with a larger batch) instead.")
        return super().prepare(request)

    def prepare_model(self, model: torch.nn.Module, *, device_placement: bool = True,
                      evaluation_mode: bool = False) -> torch.nn.Module:
        """Split ``model``, prepare this rank's stages in the mesh order, wrap them
        (``evaluation_mode``: every call of the result runs forward only)."""
        name = type(model).__name__
        config = self.parallelism.pp_handler
        topology = self.topology
        plan = plan_stages(model, topology.num_stages, path=config.layers,
                           split_points=config.split_points)
        key_order = list(model.state_dict().keys())
        self._names.update((id(p), n) for n, p in model.named_parameters())
        last = topology.num_stages - 1
        shells = [(build_shell(model, plan.path, plan.stage_keys[s], first=s == 0,
                               last=s == last), s == 0, s == last)
                  for s in topology.stage_indices]
        if any(t.is_meta for t in (*model.parameters(), *model.buffers())):
            raise ConfigurationError(
                f"{name} is on the meta device: with pp_size > 1 every rank builds the model "
                "with its weights (each keeps only its stages); load it on every rank.")
        if self._sync_stages and self.dp_size > 1:
            for shell, _, _ in shells:
                self._broadcast_stage(shell)
        prepared = [(super(PipelineStrategy, self).prepare_model(
            shell, device_placement=device_placement, evaluation_mode=evaluation_mode), first,
            is_last)
            for shell, first, is_last in shells]
        local = merge_shells(model, plan.path, prepared)
        kept = {id(p) for p in local.parameters()}
        self._foreign.update((id(p), weakref.ref(p)) for p in model.parameters()
                             if id(p) not in kept)
        pipeline = PipelinedModel(local, [shell for shell, _, _ in prepared], topology, config,
                                  self.state.device, name, key_order,
                                  evaluation_only=evaluation_mode)
        self._pipelines.append(pipeline)
        return pipeline

    def broadcast_unsharded(self, model: torch.nn.Module) -> None:
        """The weights TP left whole, from the first rank of this pipeline position (the
        other positions hold other stages)."""
        import torch.distributed as dist

        from accel_parallel.mesh.tensor_parallel import broadcast_unsharded

        group = self._position_group()
        broadcast_unsharded(model, src=dist.get_global_rank(group, 0), group=group)

    def _position_group(self) -> Any:
        """The process group of the ranks that share this rank's pipeline position."""
        if self._position is None:
            import torch.distributed as dist

            ranks = self._mesh.mesh.mesh  # global ranks, ``pp`` the first dimension
            positions = [ranks[i].flatten().tolist() for i in range(ranks.shape[0])]
            self._position, _ = dist.new_subgroups_by_enumeration(positions)
        return self._position

    def _broadcast_stage(self, shell: torch.nn.Module) -> None:
        """The stage's weights from its first data-parallel replica (before sharding)."""
        import torch.distributed as dist

        group = self._mesh.dp_group
        source = dist.get_global_rank(group, 0)
        with torch.no_grad():
            for tensor in (*shell.parameters(), *shell.buffers()):
                data = tensor.data.to(self.state.device)
                dist.broadcast(data, src=source, group=group)
                tensor.data.copy_(data)

    def prepare_optimizer(self, optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
        """Only this rank's stages' parameters stay in the optimizer (and their state)."""
        # this rank's parameters may be new objects by now (sharded, rebound): by stage name
        local = {id(p): n for pipeline in self._pipelines
                 for n, p in pipeline.module.named_parameters()}
        names = [[local.get(id(p), self._names.get(id(p))) for p in g["params"]]
                 for g in optimizer.param_groups]
        if all(n is not None for group in names for n in group):
            self._whole_groups[id(optimizer)] = names  # type: ignore[assignment]
        for group in optimizer.param_groups:
            group["params"] = [p for p in group["params"] if not self._is_foreign(p)]
        for param in [p for p in optimizer.state if self._is_foreign(p)]:
            del optimizer.state[param]
        return super().prepare_optimizer(optimizer)

    def _is_foreign(self, param: torch.Tensor) -> bool:
        ref = self._foreign.get(id(param))
        return ref is not None and ref() is param

    def compile_model(self, model: torch.nn.Module, *, in_place: bool = False) -> torch.nn.Module:
        """Stages are compiled in place while prepared; the schedule wrapper never is."""
        if isinstance(model, PipelinedModel):
            return model
        return super().compile_model(model, in_place=in_place)

    def unwrap_model(self, model: torch.nn.Module, keep_fp32_wrapper: bool = True,
                     keep_torch_compile: bool = True) -> torch.nn.Module:
        """This rank's part of the model, with the original parameter names."""
        if isinstance(model, PipelinedModel):
            return model.module
        return super().unwrap_model(model, keep_fp32_wrapper, keep_torch_compile)

    # -- the step ------------------------------------------------------------------------------
    def backward(self, loss: torch.Tensor, *, accumulation_steps: int = 1,
                 **kwargs: Any) -> None:
        """The schedule already ran the backward: accept the loss the call returned, once.
        (The facade's step information, ``sync_gradients`` / ``micro_step``, has nothing to
        decide here: accumulation is refused.)"""
        kwargs = {k: v for k, v in kwargs.items() if k not in _STEP_INFO}
        if accumulation_steps > 1:
            raise ConfigurationError(
                f"gradient_accumulation_steps={accumulation_steps} with pp_size > 1: the "
                "pipeline accumulates over its micro-batches; set it to 1.")
        if kwargs:
            raise ConfigurationError(
                f"accelerator.backward({', '.join(kwargs)}=...) has no effect with pp_size > 1: "
                "the schedule runs the backward inside the model's call; drop the argument(s).")
        owner = next((p for p in self._pipelines if p.owns(loss)), None)
        if owner is None:
            raise ConfigurationError(
                "accelerator.backward got a loss that did not come from the pipeline-parallel "
                "model's call. With pp_size > 1 the schedule runs forward and backward inside "
                "model(inputs, target=labels) and returns the loss: pass exactly that loss "
                "(scale or change the loss in loss_fn instead).")
        owner.consume(loss)

    def clip_grad_norm_(self, parameters: Any, max_norm: float,
                        norm_type: float = 2) -> torch.Tensor:
        """Clip by the norm of the whole model's gradient: each stage's norm (over its own
        meshes) combined over the pipeline group, then one scale for every stage."""
        import torch.distributed as dist

        params = [p for p in (parameters if not isinstance(parameters, torch.Tensor)
                              else [parameters]) if p.grad is not None]
        local = super().clip_grad_norm_(params, float("inf"), norm_type).float()
        local = local.to(self.state.device)
        group = self.topology.group
        if norm_type == float("inf"):
            dist.all_reduce(local, op=dist.ReduceOp.MAX, group=group)
            total = local
        else:
            power = local ** norm_type
            dist.all_reduce(power, group=group)
            total = power ** (1.0 / norm_type)
        scale = min(1.0, max_norm / (float(total) + 1e-6))
        if scale < 1.0:
            for p in params:
                p.grad.mul_(scale)
        return total

    def checkpoint_format(self, models: list[torch.nn.Module]) -> Any:
        """Every rank writes its stages (``"sharded"``, DCP); see :mod:`.checkpoint`."""
        from accel_parallel.pipeline.checkpoint import PipelineCheckpointWriter

        if any(isinstance(m, PipelinedModel) for m in models):
            return PipelineCheckpointWriter(self._pipelines, self.dp_rank, self._whole_groups)
        return super().checkpoint_format(models)
