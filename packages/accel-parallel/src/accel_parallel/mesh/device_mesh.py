"""The one named DeviceMesh of a run, and the topology every strategy reads from it.

Built once per strategy from the resolved sizes (a ``ParallelismConfig``, or the one an
FSDP plugin implies): dimensions in Accelerate's order ``dp_replicate``, ``dp_shard``,
``cp``, ``sp``, ``tp`` after the outermost ``pp`` (pipeline stages; only those of size > 1, plus any the strategy must keep at size 1),
and the flattened submeshes ``dp`` (every data-parallel dimension: the ranks that read
different batches), ``dp_shard_cp`` (what FSDP2 shards over) and ``dp_cp`` (what the loss
is averaged over). ``tp`` is last, so a tensor-parallel group is consecutive ranks (one
machine). This module is the only place that calls ``init_device_mesh``.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

__all__ = ["MESH_ORDER", "FLATTENED", "BuiltMesh", "MeshSizes", "build_mesh", "mesh_dims"]


class MeshSizes(Protocol):
    """What the mesh is built from: a size per dimension of :data:`MESH_ORDER` (a
    ``ParallelismConfig``, which imports this module; this one never imports it)."""

    @property
    def sizes(self) -> Mapping[str, int]: ...

#: The order of the mesh's dimensions (outermost first).
MESH_ORDER = ("pp", "dp_replicate", "dp_shard", "cp", "sp", "tp")
#: Flattened submeshes: name -> the dimensions folded into it.
FLATTENED = {"dp": ("dp_replicate", "dp_shard"), "dp_shard_cp": ("dp_shard", "cp", "sp"),
             "dp_cp": ("dp_replicate", "dp_shard", "cp", "sp")}


class BuiltMesh:
    """A root mesh and its flattened submeshes, with per-dimension sizes and ranks."""

    def __init__(self, mesh: Any, flattened: Mapping[str, Any]) -> None:
        self.mesh = mesh
        self.flattened = dict(flattened)
        self.names: tuple[str, ...] = tuple(mesh.mesh_dim_names)
        self.sizes = dict(zip(self.names, mesh.shape, strict=True))
        self._coordinate: dict[str, int] | None = None
        self._own_group: Any = None

    @property
    def coordinate(self) -> dict[str, int]:
        """This process's position along each dimension (read on first use)."""
        if self._coordinate is None:
            self._coordinate = dict(zip(self.names, self.mesh.get_coordinate(), strict=True))
        return self._coordinate

    def submesh(self, names: str | Iterable[str]) -> Any:
        """The submesh of ``names``: one dimension, a flattened one (``"dp"``, ...) or several
        dimensions in mesh order. A name the mesh lacks is an error naming its dimensions."""
        names = (names,) if isinstance(names, str) else tuple(names)
        if len(names) == 1 and names[0] in self.flattened:
            return self.flattened[names[0]]
        missing = [n for n in names if n not in self.names and n not in self.flattened]
        if missing:
            from accel_state import ConfigurationError

            raise ConfigurationError(
                f"The device mesh has no dimension {missing[0]!r}; its dimensions are "
                f"{', '.join(self.names)} (flattened: {', '.join(self.flattened) or 'none'}).")
        with warnings.catch_warnings():  # slicing a flattened dim off the root is deprecated
            warnings.simplefilter("ignore", FutureWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            return self.mesh[names if len(names) > 1 else names[0]]

    def size(self, name: str) -> int:
        """Size of a dimension or flattened submesh; 1 for one the mesh lacks."""
        if name in self.flattened:
            return int(self.flattened[name].size())
        return self.sizes.get(name, 1)

    def rank(self, name: str) -> int:
        """This process's coordinate along a dimension or flattened submesh; 0 if absent."""
        if name in self.flattened:
            return int(self.flattened[name].get_local_rank())
        return self.coordinate.get(name, 0)

    @property
    def dp_size(self) -> int:
        return self.size("dp")

    @property
    def dp_rank(self) -> int:
        return self.rank("dp")

    @property
    def dp_group(self) -> Any:
        """The process group of this process's data-parallel peers (a group of one when
        every process reads the same batches: tensor parallelism alone)."""
        if "dp" in self.flattened:
            return self.flattened["dp"].get_group()
        if self._own_group is None:
            import torch.distributed as dist

            self._own_group = dist.new_group([dist.get_rank()], use_local_synchronization=True)
        return self._own_group


def mesh_dims(config: MeshSizes, keep: Iterable[str] = ()) -> list[tuple[str, int]]:
    """``(name, size)`` of the mesh's dimensions: those of size > 1 and those in ``keep``."""
    sizes = config.sizes
    kept = set(keep)
    unknown = kept - set(MESH_ORDER)
    if unknown:
        raise ValueError(f"unknown mesh dimension(s) {sorted(unknown)}; use {MESH_ORDER}")
    return [(n, sizes[n]) for n in MESH_ORDER if sizes[n] > 1 or n in kept]


def build_mesh(config: MeshSizes, device_type: str,
               keep: Iterable[str] = ()) -> BuiltMesh | None:
    """The named mesh for ``config`` on ``device_type`` with its flattened submeshes; None
    when no dimension is active (one process, or nothing to split)."""
    dims = mesh_dims(config, keep)
    if not dims:
        return None
    from torch.distributed.device_mesh import init_device_mesh

    names = tuple(n for n, _ in dims)
    mesh = init_device_mesh(device_type, tuple(s for _, s in dims), mesh_dim_names=names)
    flattened = {}
    for alias, parts in FLATTENED.items():
        present = tuple(n for n in parts if n in names)
        if not present:
            continue
        sub = mesh[list(present)]  # a list, as Accelerate slices (one name too)
        if hasattr(sub, "_flatten"):
            flattened[alias] = sub._flatten(alias)
        elif len(present) == 1:  # torch < 2.5: no flattening, the one dimension serves
            flattened[alias] = sub
        else:
            from accel_state import ConfigurationError

            raise ConfigurationError(
                f"Folding the mesh dimensions {present} into {alias!r} needs torch >= 2.5 "
                "(DeviceMesh._flatten); upgrade torch, or use one of those dimensions only.")
    return BuiltMesh(mesh, flattened)
