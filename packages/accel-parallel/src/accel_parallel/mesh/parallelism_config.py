"""Accelerate's ``ParallelismConfig``: the sizes of the N-D device mesh, and its handlers.

One configuration names how many processes each kind of parallelism spans:
``dp_replicate`` (DDP replicas, or HSDP's replicate dimension), ``dp_shard`` (FSDP2
sharding), ``cp`` (context parallelism) and ``tp`` (tensor parallelism). Their product is
the number of processes. The strategy builds ONE named ``DeviceMesh`` from it
(:mod:`accel_parallel.mesh.device_mesh`) and applies the parallelisms in one order
(docs/parallel.md). Fields left as None come from Accelerate's ``PARALLELISM_CONFIG_*``
variables (what its launcher writes), else 1.
"""

from __future__ import annotations

import copy
import warnings
from dataclasses import dataclass, field, fields
from typing import Any

from accel_state import ConfigurationError
from accel_state import env as _env

from accel_parallel.config_values import positive_int
from accel_parallel.mesh.device_mesh import MESH_ORDER, BuiltMesh, build_mesh, mesh_dims
from accel_parallel.mesh.sequence_parallel import DeepSpeedSequenceParallelConfig
from accel_parallel.pipeline.config import PipelineParallelConfig

__all__ = ["ParallelismConfig", "TorchTensorParallelConfig", "TorchContextParallelConfig",
           "TorchTensorParallelPlugin", "CP_COMM_STRATEGIES"]

CP_COMM_STRATEGIES = ("allgather", "alltoall")
_CP_BACKENDS = ("torch",)
_SP_BACKENDS = ("deepspeed", "torch", "accelerate")


@dataclass(kw_only=True)
class TorchTensorParallelConfig:
    """Options of tensor parallelism (``ParallelismConfig(tp_handler=...)``)."""

    enable_async_tp: bool = False
    """Overlap TP's collectives with the matmuls (torch's async TP: CUDA and torch.compile)."""
    tp_plan: dict[str, Any] | None = None
    """Module-name pattern -> style (``"colwise"``, ``"rowwise"``, ``"sequence_parallel"``,
    ... or a torch ``ParallelStyle``); None: the model's own plan (``_tp_plan``)."""

    def __post_init__(self) -> None:
        if not isinstance(self.enable_async_tp, bool):
            raise ConfigurationError(f"TorchTensorParallelConfig(enable_async_tp="
                                     f"{self.enable_async_tp!r}) must be True or False.")
        if self.tp_plan is not None and not isinstance(self.tp_plan, dict):
            raise ConfigurationError(
                f"TorchTensorParallelConfig(tp_plan={self.tp_plan!r}) must be a dict of module-"
                "name pattern -> style, e.g. {'layers.*.up': 'colwise', 'layers.*.down': "
                "'rowwise'}.")


@dataclass(kw_only=True)
class TorchContextParallelConfig:
    """Options of context parallelism (``ParallelismConfig(cp_handler=...)``)."""

    cp_comm_strategy: str | None = None
    """How ranks exchange keys/values in attention: ``allgather`` (default) or ``alltoall``
    (env PARALLELISM_CONFIG_CP_COMM_STRATEGY)."""

    def __post_init__(self) -> None:
        value = self.cp_comm_strategy
        if value is None:
            value = _env.PARALLELISM_CONFIG_CP_COMM_STRATEGY.get("allgather")
        if str(value).strip().lower() not in CP_COMM_STRATEGIES:
            source = "" if self.cp_comm_strategy is not None else \
                " (from PARALLELISM_CONFIG_CP_COMM_STRATEGY)"
            raise ConfigurationError(  # Accelerate's opening words, which its tests match
                f"Invalid cp_comm_strategy: {value}{source}; use one of "
                f"{', '.join(CP_COMM_STRATEGIES)}.")
        self.cp_comm_strategy = str(value).strip().lower()


def _size(value: Any, name: str, var: Any) -> int:
    return positive_int(value, name, var, default=1, owner="ParallelismConfig",
                        note=" (1 turns that parallelism off)")


@dataclass(kw_only=True)
class ParallelismConfig:
    """Sizes of the device mesh's dimensions; their product is the number of processes.

    ``dp_replicate_size > 1, dp_shard_size == 1``: DDP (with ``tp_size``: TP replicas);
    ``dp_shard_size > 1``: FSDP2; both: HSDP; ``tp_size``/``cp_size`` split each model
    (tensor / context parallel) within a data-parallel replica.
    """

    dp_replicate_size: int | None = None
    """Data-parallel replicas (env PARALLELISM_CONFIG_DP_REPLICATE_SIZE, default 1)."""
    dp_shard_size: int | None = None
    """Processes each replica's parameters are sharded over with FSDP2 (env ..._DP_SHARD_SIZE)."""
    tp_size: int | None = None
    """Tensor-parallel degree (env PARALLELISM_CONFIG_TP_SIZE, default 1)."""
    cp_size: int | None = None
    """Context-parallel degree for SDPA attention, CUDA only (env ..._CP_SIZE, default 1)."""
    cp_backend: str | None = None
    """Context-parallel implementation: ``torch`` (env ..._CP_BACKEND; the only one)."""
    sp_size: int | None = None
    """Ulysses sequence-parallel degree (env ..._SP_SIZE, default 1): each sequence is split
    over this many processes, which read the same batches (accel_parallel.mesh.ulysses)."""
    sp_backend: str | None = None
    """Ulysses backend (env ..._SP_BACKEND): ``deepspeed`` (Accelerate's name, the default),
    ``torch`` or ``accelerate`` all run accel's torch-native Ulysses, without DeepSpeed."""
    tp_handler: TorchTensorParallelConfig | None = None
    """Tensor-parallel options (and plan); default one when ``tp_size > 1``."""
    cp_handler: TorchContextParallelConfig | None = None
    """Context-parallel options; default one when ``cp_size > 1``."""
    pp_size: int | None = None
    """Pipeline-parallel degree: stages over the outermost ``pp`` dimension (env
    PARALLELISM_CONFIG_PP_SIZE, default 1; :mod:`accel_parallel.pipeline`)."""
    pp_handler: PipelineParallelConfig | None = None
    """Pipeline options (schedule, micro-batches, split, loss); default one when
    ``pp_size > 1``."""
    sp_handler: DeepSpeedSequenceParallelConfig | None = None
    """Ulysses options; default one (from the PARALLELISM_CONFIG_SP_* variables) when
    ``sp_size > 1``."""
    device_mesh: Any = field(default=None, init=False, repr=False, compare=False)
    """The mesh built by :meth:`get_device_mesh` (None before)."""
    _built: BuiltMesh | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name in ("dp_replicate", "dp_shard", "tp", "cp", "sp", "pp"):
            var = getattr(_env, f"PARALLELISM_CONFIG_{name.upper()}_SIZE")
            setattr(self, f"{name}_size", _size(getattr(self, f"{name}_size"), f"{name}_size",
                                                var))
        self.cp_backend = self._choice("cp_backend", _env.PARALLELISM_CONFIG_CP_BACKEND,
                                       _CP_BACKENDS)
        self.sp_backend = self._choice("sp_backend", _env.PARALLELISM_CONFIG_SP_BACKEND,
                                       _SP_BACKENDS)
        if self.cp_size > 1 and self.sp_size > 1:
            raise ConfigurationError(
                f"cp_size={self.cp_size} and sp_size={self.sp_size}: context and sequence "
                "parallelism both split the sequence; set one of them to 1.")
        self._check_handler("tp_handler", TorchTensorParallelConfig)
        self._check_handler("cp_handler", TorchContextParallelConfig)
        self._check_handler("sp_handler", DeepSpeedSequenceParallelConfig)
        self._check_handler("pp_handler", PipelineParallelConfig)
        if self.pp_size > 1 and self.pp_handler is None:
            self.pp_handler = PipelineParallelConfig()
        if self.sp_size > 1 and self.sp_handler is None:
            self.sp_handler = DeepSpeedSequenceParallelConfig()
        if self.sp_size > 1 and self.sp_handler is not None:
            self.sp_handler.check_sp_size(self.sp_size)
        if self.tp_size > 1 and self.tp_handler is None:
            self.tp_handler = TorchTensorParallelConfig()
        if self.cp_size > 1 and self.cp_handler is None:
            self.cp_handler = TorchContextParallelConfig()

    def _choice(self, name: str, var: Any, valid: tuple[str, ...]) -> str:
        value = getattr(self, name)
        value = var.get(valid[0]) if value is None else value
        text = str(value).strip().lower()
        if text not in valid:
            raise ConfigurationError(f"ParallelismConfig {name}={value!r} is not valid; use one "
                                     f"of {', '.join(valid)}.")
        return text

    def _check_handler(self, name: str, cls: type) -> None:
        handler = getattr(self, name)
        if handler is not None and not isinstance(handler, cls):
            raise ConfigurationError(f"ParallelismConfig({name}={handler!r}) must be a "
                                     f"{cls.__name__} (or None for the defaults).")

    # -- sizes -------------------------------------------------------------------------------
    @property
    def sizes(self) -> dict[str, int]:
        """Every dimension's size, in the mesh's order (``pp``, ``dp_replicate``,
        ``dp_shard``, ``cp``, ``sp``, ``tp``)."""
        return {name: getattr(self, f"{name}_size") for name in MESH_ORDER}

    @property
    def total_size(self) -> int:
        """Processes the configuration spans: the product of every size."""
        total = 1
        for size in self.sizes.values():
            total *= size
        return total

    @property
    def data_parallel_size(self) -> int:
        """Different batches per step: ``dp_replicate_size * dp_shard_size``."""
        return self.dp_replicate_size * self.dp_shard_size

    @property
    def non_data_parallel_size(self) -> int:
        """Processes that see the same batch: ``tp_size * cp_size * sp_size``."""
        return self.tp_size * self.cp_size * self.sp_size

    @property
    def dp_replicate_enabled(self) -> bool:
        return self.dp_replicate_size > 1

    @property
    def dp_shard_enabled(self) -> bool:
        return self.dp_shard_size > 1

    @property
    def tp_enabled(self) -> bool:
        return self.tp_size > 1

    @property
    def cp_enabled(self) -> bool:
        return self.cp_size > 1

    @property
    def sp_enabled(self) -> bool:
        return self.sp_size > 1

    @property
    def pp_enabled(self) -> bool:
        return self.pp_size > 1

    @property
    def dp_enabled(self) -> bool:
        """Whether batches differ between processes (any data-parallel dimension > 1)."""
        return self.data_parallel_size > 1

    @property
    def fsdp_enabled(self) -> bool:
        """Whether parameters are sharded with FSDP2 (``dp_shard``, ``cp`` or ``sp`` > 1: the
        ranks that split one sequence shard its model, and so average its gradients)."""
        return self.dp_shard_enabled or self.cp_enabled or self.sp_enabled

    def _enabled(self, names: tuple[str, ...]) -> list[str]:
        return [n for n in names if getattr(self, f"{n}_size") > 1]

    @property
    def dp_dim_names(self) -> list[str]:
        """Active data-parallel dimensions (flattened into ``dp``)."""
        return self._enabled(("dp_replicate", "dp_shard"))

    @property
    def non_dp_dim_names(self) -> list[str]:
        """Active dimensions whose processes get the same batch (``tp``, ``cp``, ``sp``)."""
        return self._enabled(("tp", "cp", "sp"))

    @property
    def dp_shard_cp_dim_names(self) -> list[str]:
        """Dimensions FSDP2 shards over (flattened into ``dp_shard_cp``): CP ranks share the
        sample's gradients, so they take part in the reduce-scatter."""
        return self._enabled(("dp_shard", "cp", "sp"))

    @property
    def dp_cp_dim_names(self) -> list[str]:
        """Dimensions the loss is averaged over (flattened into ``dp_cp``)."""
        return self._enabled(("dp_replicate", "dp_shard", "cp", "sp"))

    @property
    def fsdp_dim_names(self) -> list[str]:
        """The mesh dimensions ``fully_shard`` gets (HSDP: replicate and shard)."""
        return [*self._enabled(("dp_replicate",)), "dp_shard_cp"]

    @property
    def active_mesh_dims(self) -> list[str]:
        """Every dimension of size > 1: the data-parallel ones, then the others."""
        return self.dp_dim_names + self.non_dp_dim_names

    # -- checks ------------------------------------------------------------------------------
    def check_world_size(self, world_size: int) -> None:
        """The product of the sizes must be the number of processes; the error names each."""
        if self.total_size != world_size:
            sizes = ", ".join(f"{name}_size={size}" for name, size in self.sizes.items())
            raise ConfigurationError(
                f"ParallelismConfig({sizes}) spans {self.total_size} process(es), but this run "
                f"has {world_size} (the world size). Choose sizes whose product is {world_size}, "
                f"or launch {self.total_size} processes.")

    def _set_size(self, name: str, size: int) -> None:
        """Set one dimension's size (Accelerate's hook: an all-ones configuration on several
        processes becomes ``dp_replicate_size = num_processes``)."""
        if name not in MESH_ORDER:
            raise ConfigurationError(f"Unknown parallelism {name!r}; use one of "
                                     f"{', '.join(MESH_ORDER)}.")
        setattr(self, f"{name}_size", _size(size, f"{name}_size", None))

    # -- mesh --------------------------------------------------------------------------------
    def _get_mesh(self) -> tuple[tuple[str, ...], tuple[int, ...]] | tuple[()]:
        """``(dimension names, sizes)`` of the mesh :meth:`build_device_mesh` builds, the
        arguments of ``init_device_mesh`` (Accelerate's helper); ``()`` when none is active."""
        return tuple(zip(*mesh_dims(self)))  # type: ignore[return-value]

    def build_device_mesh(self, device_type: str, keep: tuple[str, ...] = ()) -> Any:
        """A new named mesh of the active dimensions (``keep``: dimensions included even at
        size 1) with the flattened ``dp`` / ``dp_shard_cp`` / ``dp_cp`` submeshes; None
        when nothing is active."""
        self._built = build_mesh(self, device_type, keep=keep)
        return self._built.mesh if self._built is not None else None

    def get_device_mesh(self, device_type: str | None = None) -> Any:
        """The mesh, built on first use for ``device_type`` (Accelerate's accessor)."""
        if self.device_mesh is None:
            if device_type is None:
                raise ConfigurationError("ParallelismConfig.get_device_mesh() builds the mesh on "
                                         "first use: pass a device_type such as 'cuda' or 'cpu'.")
            self.device_mesh = self.build_device_mesh(device_type)
        elif device_type is not None and self.device_mesh.device_type != device_type:
            raise ConfigurationError(
                f"The device mesh was built for {self.device_mesh.device_type!r}, not "
                f"{device_type!r}; use one device type per ParallelismConfig.")
        return self.device_mesh

    def get_submesh(self, dim_names: Any) -> Any:
        """The submesh of ``dim_names`` (a flattened name such as ``"dp"`` included)."""
        if self._built is None:
            raise ConfigurationError("ParallelismConfig.get_submesh() needs the mesh: call "
                                     "get_device_mesh(device_type) first.")
        return self._built.submesh(dim_names)

    def to_json(self) -> dict[str, Any]:
        """The configuration as plain data (handlers as dicts; no mesh)."""
        data: dict[str, Any] = {}
        for item in fields(self):
            if item.name in ("device_mesh", "_built"):
                continue
            value = getattr(self, item.name)
            data[item.name] = copy.deepcopy(vars(value)) if hasattr(value, "__dict__") else value
        return data

    def _warn_unused_handlers(self) -> None:
        for name in ("tp", "cp", "sp", "pp"):
            if getattr(self, f"{name}_size") == 1 and getattr(self, f"{name}_handler") is not None:
                warnings.warn(f"ParallelismConfig.{name}_handler is set but {name}_size is 1: "
                              "the handler is ignored.", UserWarning, stacklevel=3)


@dataclass(kw_only=True)
class TorchTensorParallelPlugin:
    """Accelerate's deprecated tensor-parallel plugin: ``ParallelismConfig(tp_size=...)``."""

    tp_size: int = 1
    """Tensor-parallel degree; the remaining processes become data-parallel replicas."""
    torch_device_mesh: Any = None
    """Accelerate's field; accel builds the mesh itself, so a given mesh is refused."""

    def __post_init__(self) -> None:
        self.tp_size = _size(self.tp_size, "tp_size", None)
        if self.torch_device_mesh is not None:
            raise ConfigurationError(
                "TorchTensorParallelPlugin(torch_device_mesh=...) is not used: accel builds one "
                "mesh for every parallelism. Pass ParallelismConfig(tp_size=...) instead.")
        warnings.warn("TorchTensorParallelPlugin is deprecated (as in Accelerate); use "
                      "ParallelismConfig(tp_size=...).", FutureWarning, stacklevel=3)

    def to_parallelism_config(self) -> ParallelismConfig:
        return ParallelismConfig(tp_size=self.tp_size)
