"""``get_mixed_precision_context_manager``: Accelerate's autocast factory over the shared
:class:`~accel.state.AcceleratorState` (its ``mixed_precision`` and device)."""

from __future__ import annotations

import contextlib
from typing import Any

from accel_precision import AutocastKwargs
from accel_precision.compat import autocast_context

from accel._accelerator_state import AcceleratorState

__all__ = ["get_mixed_precision_context_manager"]


def get_mixed_precision_context_manager(native_amp: bool = False,
                                        autocast_kwargs: AutocastKwargs | None = None
                                        ) -> contextlib.AbstractContextManager[Any]:
    """``torch.autocast`` for the current state's mixed precision on its device when
    ``native_amp`` (fp16 -> float16, bf16/fp8 -> bfloat16), else a no-op context."""
    state = AcceleratorState()
    return autocast_context(state.mixed_precision, state.device.type, native_amp,
                            autocast_kwargs)
