"""Whether a model is already sharded with DTensor parameters (FSDP2 / tensor parallel)."""

from __future__ import annotations

import torch

__all__ = ["model_has_dtensor"]


def model_has_dtensor(model: torch.nn.Module) -> bool:
    """True when any parameter of ``model`` (or of the model a wrapper holds in
    ``.module``) is a ``torch.distributed.tensor.DTensor``."""
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # torch built without distributed
        return False
    inner = getattr(model, "module", model)
    if not isinstance(inner, torch.nn.Module):
        inner = model
    return any(isinstance(p, DTensor) for p in inner.parameters())
