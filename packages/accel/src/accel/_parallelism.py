"""The ``Accelerator``'s view of N-D parallelism: its ``ParallelismConfig``, the mesh and the
per-dimension ranks (Accelerate's names).

The strategy owns the mesh (``Strategy.device_mesh``) and the topology
(``parallel_ranks``); this mixin only reads them, so it holds no branch on a backend.
Ranks along a dimension the run does not have are 0.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from accel_parallel import ParallelismConfig

__all__ = ["ParallelismMixin"]


class ParallelismMixin:
    """Mesh and rank properties of ``Accelerator`` (expects ``_strategy``)."""

    _strategy: Any

    @property
    def parallelism_config(self) -> ParallelismConfig | None:
        """The resolved ``ParallelismConfig`` (sizes filled in), or None without one."""
        return self._strategy.parallelism_config

    @property
    def torch_device_mesh(self) -> Any:
        """The run's one named ``DeviceMesh`` (dimensions ``dp_replicate``, ``dp_shard``,
        ``cp``, ``tp`` of size > 1), or None when the strategy has none (DDP, one device)."""
        return self._strategy.device_mesh

    def _rank_along(self, name: str) -> int:
        return int(self._strategy.parallel_ranks.get(name, 0))

    @property
    def data_parallel_rank(self) -> int:
        """This process's index among the data-parallel replicas (``dp_replicate``)."""
        return self._rank_along("dp_replicate")

    @property
    def data_parallel_shard_rank(self) -> int:
        """This process's index along the FSDP shard dimension (``dp_shard``)."""
        return self._rank_along("dp_shard")

    @property
    def tensor_parallel_rank(self) -> int:
        return self._rank_along("tp")

    @property
    def context_parallel_rank(self) -> int:
        return self._rank_along("cp")

    @property
    def pipeline_parallel_rank(self) -> int:
        """Always 0: accel's strategies have no pipeline dimension."""
        return 0

    @property
    def is_composable_parallelism_enabled(self) -> bool:
        """Whether models are sharded on a device mesh with FSDP2 (Accelerate's meaning: the
        strategy's ``shards_parameters``)."""
        return bool(self._strategy.shards_parameters)

    @property
    def should_save_model(self) -> bool:
        """Whether this process takes part in saving the model: every process does (sharded
        checkpoints are written by all ranks; full ones are gathered to the main one)."""
        return True

    def maybe_context_parallel(self, buffers: list[Any] | None = None,
                               buffer_seq_dims: list[int] | None = None,
                               no_restore_buffers: Any = None
                               ) -> contextlib.AbstractContextManager[Any]:
        """Run the block context-parallel: each of ``buffers`` (inputs, labels, positions) is
        cut to this rank's part of its sequence dimension (``buffer_seq_dims``) and SDPA
        attends across the ``cp`` ranks. A no-op when ``cp_size`` is 1."""
        return self._strategy.context_parallel(buffers, buffer_seq_dims, no_restore_buffers)
