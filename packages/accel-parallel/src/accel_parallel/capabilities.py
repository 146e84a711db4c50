"""The questions the facade asks a strategy about the run, instead of asking which it is.

``Accelerator.is_fsdp2``, ``multi_device``, ``LocalSGD``, the data side and
``AcceleratorState`` need facts about the run (is it distributed, are parameters sharded,
can replicas be averaged, which plugins run), never the backend's name (issue 40.6,
DESIGN.md §4). Each answer has a default derived from Accelerate's ``DistributedType``
here, and a backend whose answer differs overrides it; the facade compares no run type.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from accel_state import DistributedType

if TYPE_CHECKING:
    from accel_state import PartialState

__all__ = ["RunCapabilities"]

#: Accelerate's run types of plain data parallelism over accelerators of one kind, and those
#: whose replicas hold whole parameters (they add one process and CPU processes)
_MULTI_DEVICE = frozenset({
    DistributedType.MULTI_GPU, DistributedType.MULTI_MLU, DistributedType.MULTI_SDAA,
    DistributedType.MULTI_MUSA, DistributedType.MULTI_NPU, DistributedType.MULTI_XPU,
    DistributedType.MULTI_HPU, DistributedType.MULTI_NEURON})
_REPLICATED = _MULTI_DEVICE - {DistributedType.MULTI_NEURON} | {DistributedType.NO,
                                                              DistributedType.MULTI_CPU}


class RunCapabilities:
    """What a strategy answers about its run (mixed into ``Strategy``; needs ``state``)."""

    state: PartialState

    @property
    def distributed_type(self) -> DistributedType:
        """Accelerate's ``DistributedType`` of this run (``NO``, ``MULTI_CPU``, ``FSDP``, ...)."""
        return self.state.distributed_type

    @property
    def runs_distributed(self) -> bool:
        """Whether the run is distributed in Accelerate's sense: :attr:`distributed_type` is
        not ``NO`` (several processes, or one under an engine of its own: FSDP, DeepSpeed)."""
        return self.distributed_type is not DistributedType.NO

    @property
    def multi_device(self) -> bool:
        """Accelerate's ``multi_device``: plain data parallelism over several accelerators
        of one kind (False for CPU processes and for FSDP / DeepSpeed, types of their own)."""
        return self.state.use_distributed and self.distributed_type in _MULTI_DEVICE

    @property
    def replicates_parameters(self) -> bool:
        """Whether each replica holds whole, ordinary parameters that can be averaged
        (``LocalSGD``): plain data parallelism or one process, not a sharding engine."""
        return self.distributed_type in _REPLICATED

    @property
    def shards_parameters(self) -> bool:
        """Whether prepared models hold their parameters as shards on the device mesh
        (DTensors that torch's ``fully_shard`` gathers on use): what Accelerate's
        ``is_fsdp2`` answers. An engine that shards behind its own wrapper (DeepSpeed
        ZeRO-3) answers False, as Accelerate's run type says; by default the run type
        decides (``FSDP``)."""
        return self.distributed_type is DistributedType.FSDP

    @property
    def plugins_in_use(self) -> dict[str, Any]:
        """The plugins this strategy runs with, by Accelerate's kind (``"fsdp"``, ...),
        including the ones it built itself (an FSDP2 plugin made for a ``ParallelismConfig``
        that shards): what ``AcceleratorState`` reports. None by default."""
        return {}
