"""accel's own tensor-parallel style: :class:`ReplicateParallel` (transformers'
``"replicate"``). Its own module, because defining it imports torch's tensor-parallel API:
plans (:mod:`accel_parallel.mesh.tp_plan`, read at ``import accel``) name it by string and load
it only when a plan uses it, and :mod:`accel_parallel.mesh.tensor_parallel` re-exports it.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["ReplicateParallel"]


def _parallel_style_base() -> type:
    from torch.distributed.tensor.parallel import ParallelStyle

    return ParallelStyle


class ReplicateParallel(_parallel_style_base()):  # type: ignore[misc]
    """Keep a module whole but make its parameters replicated DTensors on the tp mesh
    (transformers' ``"replicate"``): every parameter of a TP model then lives on the mesh,
    which FSDP2 and checkpoints expect. Inputs enter as replicated DTensors and outputs
    leave as local tensors, so the neighbours see plain tensors as before."""

    src_data_rank = 0

    def _apply(self, module: torch.nn.Module, device_mesh: Any) -> torch.nn.Module:
        from torch.distributed.tensor import distribute_module

        return distribute_module(module, device_mesh, input_fn=_replicated_inputs,
                                 output_fn=_local_outputs)


def _replicated_inputs(module: torch.nn.Module, inputs: Any, device_mesh: Any) -> Any:
    from torch.distributed.tensor import DTensor, Replicate

    return tuple(DTensor.from_local(x, device_mesh, [Replicate()], run_check=False)
                 if isinstance(x, torch.Tensor) and not isinstance(x, DTensor) else x
                 for x in inputs)


def _local_outputs(module: torch.nn.Module, outputs: Any, device_mesh: Any) -> Any:
    from torch.distributed.tensor import DTensor

    if isinstance(outputs, DTensor):
        return outputs.to_local()
    if isinstance(outputs, tuple):
        return tuple(o.to_local() if isinstance(o, DTensor) else o for o in outputs)
    return outputs
