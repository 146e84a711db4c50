"""Accelerate's ``accelerate.utils.versions`` path: accel-state's version comparisons."""

from __future__ import annotations

from accel_state.imports import compare_versions, is_torch_version

__all__ = ["compare_versions", "is_torch_version"]
