"""Reading DeepSpeed's ``.pt`` files without running code of the file's choosing:
``torch.load(weights_only=True)`` with an allow-list of the few DeepSpeed classes its ZeRO
checkpoints pickle, optionally from bytes that were hash-checked (a :data:`VerifiedRead`).
Used by the writer's loads (:mod:`~accel_parallel.deepspeed.checkpoint`) and by the
full-state reader (:mod:`~accel_parallel.deepspeed.states`)."""

from __future__ import annotations

import contextlib
import io
import pickle
import re
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["VerifiedRead", "deepspeed_safe_globals", "restricted_load"]


def deepspeed_safe_globals() -> list[Any]:
    """The DeepSpeed classes its ZeRO checkpoints pickle besides tensors and containers
    (seen in stage 0-3, fp32/bf16/fp16, offload checkpoints): plain data holders."""
    from deepspeed.runtime.fp16.loss_scaler import DynamicLossScaler, LossScaler
    from deepspeed.runtime.zero.config import ZeroStageEnum
    from deepspeed.utils.tensor_fragment import fragment_address

    return [LossScaler, DynamicLossScaler, ZeroStageEnum, fragment_address]


#: ``read(path) -> bytes``: a file's bytes, read once and hash-checked against the
#: checkpoint's manifest (accel-checkpoint's ``verified_reader``, handed down by its caller).
VerifiedRead = Callable[[Any], bytes]


def restricted_load(path: Any, map_location: Any = None, read: VerifiedRead | None = None
                    ) -> Any:
    """``torch.load(weights_only=True)`` with :func:`deepspeed_safe_globals` allowed.
    ``read``: unpickle the bytes it returns for ``path`` (the very bytes it checked)
    instead of opening the file again."""
    allowed = deepspeed_safe_globals()
    scope = getattr(torch.serialization, "safe_globals", None)
    if scope is None:  # torch 2.4: only the process-wide list exists
        torch.serialization.add_safe_globals(allowed)
    source = io.BytesIO(read(path)) if read is not None else path  # BytesIO shares the bytes
    with scope(allowed) if scope is not None else contextlib.nullcontext():
        try:
            return torch.load(source, map_location=map_location, weights_only=True)
        except pickle.UnpicklingError as error:
            named = re.search(r"GLOBAL ([\w.]+)", str(error))
            what = named.group(1) if named else str(error).splitlines()[0]
            raise pickle.UnpicklingError(
                f"{path} holds an object outside the allow-list of DeepSpeed checkpoint "
                f"classes, which accel does not unpickle: {what}. Was it written by another "
                "DeepSpeed version? Convert it with DeepSpeed's zero_to_fp32 where you trust "
                "it (`accel merge-weights --trust_pickles`).") from None
