"""What DeepSpeed cannot be combined with, refused before it is needed or even installed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from accel_state import ConfigurationError

from accel_parallel.mesh.sequence_parallel import check_sequence_parallel_runtime
from accel_parallel.plugins import conflicts


def refuse_combinations(plugins: Mapping[str, Any]) -> None:
    """Refuse what DeepSpeed cannot be combined with (sequence parallelism, another sharding
    plugin), whether or not DeepSpeed is installed: the configuration is wrong anywhere."""
    check_sequence_parallel_runtime(plugins.get("parallelism_config"), "deepspeed")
    others = conflicts("deepspeed", plugins)
    if others:
        raise ConfigurationError(
            f"DeepSpeed cannot be combined with {', '.join(others)} (it shards the model "
            "its own way): use DeepSpeed ZeRO alone, or FSDP2 / ParallelismConfig alone.")
