"""``PipelineParallelConfig``: how ``ParallelismConfig(pp_size=...)`` pipelines a model.

The options of pipeline-parallel training (``ParallelismConfig(pp_handler=...)``): the
schedule, the number of micro-batches, how many stages each rank holds (interleaved 1F1B),
where the model is split and the loss the last stage computes. Fields left as None come
from the ``PARALLELISM_CONFIG_PP_*`` variables the launcher writes, else the defaults.
No torch import here: the configuration is plain data.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from accel_state import ConfigurationError
from accel_state import env as _env

from accel_parallel.config_values import positive_int

__all__ = ["PipelineParallelConfig", "PP_SCHEDULES"]

#: Schedule name -> whether it runs several stages per rank.
PP_SCHEDULES = {"gpipe": False, "1f1b": False, "interleaved_1f1b": True}


def _positive(value: Any, name: str, var: Any, default: int | None) -> int | None:
    return positive_int(value, name, var, default=default, owner="PipelineParallelConfig")


@dataclass(kw_only=True)
class PipelineParallelConfig:
    """Options of pipeline parallelism (``ParallelismConfig(pp_size=N, pp_handler=...)``)."""

    schedule: str | None = None
    """``"gpipe"``, ``"1f1b"`` (default) or ``"interleaved_1f1b"`` (env
    PARALLELISM_CONFIG_PP_SCHEDULE)."""
    num_microbatches: int | None = None
    """Micro-batches each batch is cut into (its first dimension must divide by it); default
    ``pp_size * stages_per_rank`` (env PARALLELISM_CONFIG_PP_NUM_MICROBATCHES)."""
    stages_per_rank: int | None = None
    """Stages each rank holds: 1 for GPipe and 1F1B, default 2 for interleaved 1F1B (env
    PARALLELISM_CONFIG_PP_STAGES_PER_RANK)."""
    split_points: Sequence[str] | None = None
    """Names of the blocks where a new stage begins (``["layers.3"]``: stage 1 starts at
    block 3); None: the blocks split evenly. ``pp_size * stages_per_rank - 1`` names."""
    layers: str | None = None
    """Dotted path of the ``ModuleList`` of blocks (``"model.layers"``); None: the model's
    largest ``ModuleList``."""
    loss_fn: Callable[[Any, Any], Any] | None = None
    """``loss_fn(output, target)`` the last stage computes per micro-batch (a mean over the
    micro-batch); may instead be passed to each call, ``model(x, target=y, loss_fn=f)``."""

    def __post_init__(self) -> None:
        schedule = self.schedule
        if schedule is None:
            schedule = _env.PARALLELISM_CONFIG_PP_SCHEDULE.get("1f1b")
        text = str(schedule).strip().lower().replace("-", "_")
        if text not in PP_SCHEDULES:
            raise ConfigurationError(
                f"PipelineParallelConfig(schedule={schedule!r}) is not valid; use one of "
                f"{', '.join(PP_SCHEDULES)}.")
        self.schedule = text
        self.num_microbatches = _positive(self.num_microbatches, "num_microbatches",
                                          _env.PARALLELISM_CONFIG_PP_NUM_MICROBATCHES, None)
        default_stages = 2 if PP_SCHEDULES[text] else 1
        self.stages_per_rank = _positive(self.stages_per_rank, "stages_per_rank",
                                         _env.PARALLELISM_CONFIG_PP_STAGES_PER_RANK,
                                         default_stages)
        if not PP_SCHEDULES[text] and self.stages_per_rank != 1:
            raise ConfigurationError(
                f"PipelineParallelConfig(schedule={text!r}, stages_per_rank="
                f"{self.stages_per_rank}): {text} runs one stage per rank; use "
                "schedule='interleaved_1f1b' for several, or stages_per_rank=1.")
        if self.split_points is not None:
            if isinstance(self.split_points, str) or not all(
                    isinstance(p, str) for p in self.split_points):
                raise ConfigurationError(
                    f"PipelineParallelConfig(split_points={self.split_points!r}) must be a list "
                    "of block names, e.g. ['layers.2'].")
            self.split_points = list(self.split_points)
        if self.layers is not None and not isinstance(self.layers, str):
            raise ConfigurationError(f"PipelineParallelConfig(layers={self.layers!r}) must be "
                                     "the dotted path of a ModuleList, e.g. 'model.layers'.")
        if self.loss_fn is not None and not callable(self.loss_fn):
            raise ConfigurationError(f"PipelineParallelConfig(loss_fn={self.loss_fn!r}) must be "
                                     "a callable loss_fn(output, target).")

    def stages(self, pp_size: int) -> int:
        """Total number of stages for ``pp_size`` ranks."""
        return pp_size * (self.stages_per_rank or 1)

    def microbatches(self, pp_size: int) -> int:
        """Micro-batches per step: the given number, else one per stage."""
        return self.num_microbatches or self.stages(pp_size)
