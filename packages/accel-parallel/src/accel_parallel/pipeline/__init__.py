"""Pipeline-parallel training: ``ParallelismConfig(pp_size=N)`` behind the four lines.

The model is split into stages (:mod:`.split`), each rank runs its stage(s) with
``torch.distributed.pipelining`` (:mod:`.model`), and :mod:`.strategy` composes it with
DP / FSDP2 / TP on one mesh whose outermost dimension is ``pp``. Only the configuration is
imported here; the rest loads when a pipeline is built.
"""

from __future__ import annotations

from accel_parallel.pipeline.config import PP_SCHEDULES, PipelineParallelConfig

__all__ = ["PipelineParallelConfig", "PP_SCHEDULES"]
