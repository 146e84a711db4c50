"""The world a collective runs over: the default group or an explicit process group, and
the device its helper tensors live on.

Shared by :mod:`accel_state.operations` and :mod:`accel_state.random`. A ``group`` (a
``torch.distributed.ProcessGroup``) is checked here once: it needs an initialised
``torch.distributed`` and this process as a member, since torch would otherwise skip the
collective silently.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from accel_state.errors import ConfigurationError

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup

__all__ = ["group_size", "source_rank"]  # the others are internal to the collectives


def group_size(group: ProcessGroup | None = None, owner: str = "a collective") -> int:
    """Processes in ``group`` (``None``: the default group; 1 when torch.distributed is absent
    or not initialised). ``owner`` names the caller in the errors.

    A ``group`` needs an initialised torch.distributed and this process as a member: torch
    reports -1 for a group this process is not in and would skip every collective on it
    silently, which is always a mistake.
    """
    dist = torch.distributed
    live = dist.is_available() and dist.is_initialized()
    if group is None:
        return dist.get_world_size() if live else 1
    if not live:
        raise ConfigurationError(
            f"{owner} got group={group!r}, but torch.distributed is not initialised, so no "
            "process group can exist; initialise it first (torch.distributed."
            "init_process_group or PartialState()) or pass group=None.")
    size = dist.get_world_size(group)
    if size < 1:
        raise ConfigurationError(
            f"{owner} got group={group!r}, but this process (global rank {dist.get_rank()}) "
            "is not a member of it; pass the process group this process belongs to.")
    return size


def source_rank(from_process: int, group: ProcessGroup | None) -> int:
    """The global rank torch needs for ``src``: ``from_process`` itself without a group,
    else the global rank of the group's rank ``from_process``."""
    if group is None:
        return from_process
    try:
        return torch.distributed.get_global_rank(group, from_process)
    except ValueError as error:
        raise ConfigurationError(
            f"from_process={from_process!r} is not a rank of group={group!r} (of size "
            f"{torch.distributed.get_world_size(group)}); with group= it is the rank within "
            "the group, e.g. 0 for the group's first process.") from error


def _collective_device() -> torch.device:
    """Device for the small helper tensors a collective needs under the current backend."""
    config = str(torch.distributed.get_backend_config())
    if "gloo" in config or "mpi" in config:
        return torch.device("cpu")
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None and accelerator.is_available():
        kind = accelerator.current_accelerator().type
        return torch.device(kind, accelerator.current_device_index())
    return torch.device("cuda", torch.cuda.current_device())


def _local_device(kind: str) -> torch.device:
    """This process's device of type ``kind`` (its current index for accelerators)."""
    module = getattr(torch, kind, None) if kind != "cpu" else None
    if module is not None and hasattr(module, "current_device"):
        return torch.device(kind, module.current_device())
    return torch.device(kind)
