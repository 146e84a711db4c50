"""Accelerate's ``accelerate.utils.torch_xla`` path: ``install_xla``, refused (accel does not
run on TPUs)."""

from __future__ import annotations

from accel._accelerate_helpers import install_xla

__all__ = ["install_xla"]
