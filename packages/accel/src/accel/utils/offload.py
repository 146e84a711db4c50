"""Accelerate's ``accelerate.utils.offload`` module path: re-exports of accel-inference only."""

from __future__ import annotations

from accel_inference.offload import (
    OffloadedWeightsLoader,
    PrefixedDataset,
    extract_submodules_state_dict,
    load_offloaded_weight,
    offload_state_dict,
    offload_weight,
    save_offload_index,
)

__all__ = ["offload_weight", "load_offloaded_weight", "save_offload_index", "offload_state_dict",
           "OffloadedWeightsLoader", "PrefixedDataset", "extract_submodules_state_dict"]
