"""Find the user's module inside DDP / DataParallel / torch.compile wrappers, and tell
whether it is already sharded."""

from __future__ import annotations

import torch

__all__ = ["extract_model_from_parallel", "is_sharded_model"]

_PARALLEL_WRAPPERS = (torch.nn.parallel.DistributedDataParallel, torch.nn.DataParallel)


def _is_compiled(model: torch.nn.Module) -> bool:
    return hasattr(model, "_orig_mod") and type(model).__name__ == "OptimizedModule"


def extract_model_from_parallel(model: torch.nn.Module, keep_fp32_wrapper: bool = True,
                                keep_torch_compile: bool = True,
                                recursive: bool = False) -> torch.nn.Module:
    """Strip data-parallel wrappers (and, unless kept, ``torch.compile`` and fp32 output casting).

    ``recursive`` also unwraps parallel wrappers nested inside the model's children.
    """
    compiled = model if _is_compiled(model) else None
    if compiled is not None:
        model = compiled._orig_mod
    while isinstance(model, _PARALLEL_WRAPPERS):
        model = model.module
    if recursive:
        for name, child in list(model.named_children()):
            setattr(model, name, extract_model_from_parallel(child, keep_fp32_wrapper,
                                                             keep_torch_compile, recursive=True))
    if not keep_fp32_wrapper:
        original = getattr(model, "_original_forward", None)
        if original is not None:
            model.forward = original
            del model._original_forward
    if compiled is not None and keep_torch_compile:
        compiled._orig_mod = model
        return compiled
    return model


def is_sharded_model(model: torch.nn.Module) -> bool:
    """Whether ``model`` is already sharded (FSDP2 ``fully_shard`` or tensor parallel): its
    parameters are DTensors, which DDP cannot broadcast or all-reduce and which are saved
    shard by shard. Wrappers share the parameters, so none needs stripping first."""
    if not torch.distributed.is_available():
        return False
    from torch.distributed.tensor import DTensor

    return any(isinstance(p, DTensor) for p in model.parameters())
