"""torch's FSDP modules, imported lazily (they pull in DTensor) and across the supported
torch versions (``torch>=2.4``).

FSDP1's names (``ShardingStrategy``, ``StateDictType``, ``CPUOffload``, ``MixedPrecision``:
the spellings Accelerate's plugin accepts) are in ``torch.distributed.fsdp`` in every
version; FSDP2's (``fully_shard``, ``MixedPrecisionPolicy``, ``OffloadPolicy``,
``CPUOffloadPolicy``) moved there in torch 2.6 from ``torch.distributed._composable.fsdp``.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["fsdp1", "fsdp2"]


def fsdp1() -> Any:
    """``torch.distributed.fsdp`` (FSDP1's enums and configs)."""
    return importlib.import_module("torch.distributed.fsdp")


def fsdp2() -> Any:
    """The module holding ``fully_shard`` and its policies in this torch."""
    module = fsdp1()
    if hasattr(module, "fully_shard"):
        return module
    return importlib.import_module("torch.distributed._composable.fsdp")
