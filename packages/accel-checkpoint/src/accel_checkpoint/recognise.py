"""Which checkpoint a folder is, told by the files in it (never by what is missing).

An accel checkpoint is a folder with ``manifest.json``. A folder without one is loaded as
a Hugging Face Accelerate checkpoint only when it holds files only Accelerate writes (its
pickled ``optimizer.bin``, ``scheduler.bin``, ``random_states_<i>.pkl``, ...) and none of
accel's own (``_data.json``, ``optimizer.safetensors``, ``random_states_<i>.safetensors``,
DCP shards, ...): a damaged or half-written accel checkpoint is never taken for an
Accelerate one, nor is a save's staging folder (``<name>.tmp-<id>``) or a parked old copy
(``<name>.old-<id>``). Standard library only.
"""

from __future__ import annotations

import re
from pathlib import Path

from accel_checkpoint.constants import LEFTOVER_INFIXES, MANIFEST_NAME

__all__ = ["accel_files", "accelerate_files", "is_save_leftover"]

# Files accel's save writes and Accelerate's save_state never does (model.safetensors is
# written by both, so it tells nothing).
_ACCEL_OWN = re.compile(
    r"_data\.json|random_states_\d+\.(?:safetensors|json)"
    r"|(?:model|optimizer|scheduler|scaler|dataloader|sampler|custom_checkpoint)(?:_\d+)?\.json"
    r"|(?:optimizer|scheduler|scaler|dataloader|sampler|custom_checkpoint)(?:_\d+)?\.safetensors"
    r"|\.metadata|__\d+_\d+\.distcp")
# Files Accelerate's save_state writes and accel never does in a checkpoint.
_ACCELERATE_ONLY = re.compile(
    r"pytorch_model(?:_\d+)?\.bin|(?:optimizer|scheduler|sampler)(?:_\d+)?\.bin"
    r"|random_states_\d+\.pkl|custom_checkpoint_\d+\.pkl|scaler\.pt|dl_state_dict(?:_\d+)?\.bin"
    r"|pytorch_model_fsdp(?:_\d+)?(?:\.bin)?|optimizer(?:_\d+)?")


def _names(path: Path) -> list[str]:
    try:
        return sorted(child.name for child in path.iterdir())
    except OSError:
        return []


def is_save_leftover(path: Path) -> bool:
    """A save's staging folder (``name.tmp-id``), a parked old copy (``name.old-id``) or a
    rotated-out checkpoint being deleted (``name.deleting-id``)."""
    return any(infix in path.name for infix in LEFTOVER_INFIXES)


def accel_files(path: Path) -> list[str]:
    """The names in folder ``path`` that only an accel save writes (``manifest.json``
    included): a folder holding any is an accel checkpoint, whole or partial."""
    return [n for n in _names(path) if n == MANIFEST_NAME or _ACCEL_OWN.fullmatch(n)]


def accelerate_files(path: Path) -> list[str]:
    """The names in folder ``path`` that only Accelerate's ``save_state`` writes."""
    return [n for n in _names(path) if _ACCELERATE_ONLY.fullmatch(n)]
