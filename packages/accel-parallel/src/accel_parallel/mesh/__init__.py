"""Everything on the run's one named DeviceMesh: the mesh itself
(:mod:`~accel_parallel.mesh.device_mesh`), its sizes
(:mod:`~accel_parallel.mesh.parallelism_config`, Accelerate's ``ParallelismConfig``), the mesh strategy and its one order
(:mod:`~accel_parallel.mesh.strategy`), tensor parallelism (``tensor_parallel``, ``tp_plan``,
``tp_styles``), context parallelism (``context_parallel``) and Ulysses sequence parallelism
on the ``sp`` dimension (``sequence_parallel``, ``ulysses``, ``ulysses_data``,
``ulysses_hf``). The names below (the device mesh's) load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from accel_parallel._lazy import lazy_getattr

__all__ = ["MESH_ORDER", "FLATTENED", "BuiltMesh", "MeshSizes", "build_mesh"]

__getattr__ = lazy_getattr(__name__, dict.fromkeys(__all__, "accel_parallel.mesh.device_mesh"))

if TYPE_CHECKING:
    from accel_parallel.mesh.device_mesh import (
        FLATTENED,
        MESH_ORDER,
        BuiltMesh,
        MeshSizes,
        build_mesh,
    )
