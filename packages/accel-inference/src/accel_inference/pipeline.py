"""Pipeline-parallel inference (Accelerate's ``prepare_pippy``) on ``torch.distributed.pipelining``.

The model is traced and split before the named submodules (``split_points``; "auto" cuts
it into equal-size pieces with the device-map machinery), each process keeps one stage,
and a GPipe schedule streams ``num_chunks`` micro-batches through the stages. The output
appears on the last process, or on every process with ``gather_output=True``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from types import MethodType
from typing import Any

import torch
from accel_checkpoint.weights import convert_bytes
from accel_state.errors import ConfigurationError
from accel_state.structures import ignorant_find_batch_size, send_to_device
from torch import nn

from accel_inference.device_map import infer_auto_device_map
from accel_inference.sizing import calculate_maximum_sizes

__all__ = ["prepare_pippy", "generate_device_map", "build_pipeline", "pippy_forward",
           "find_pippy_batch_size"]


def generate_device_map(model: nn.Module, num_processes: int = 1,
                        no_split_module_classes: Sequence[str] | None = None,
                        max_memory: dict[Any, Any] | None = None) -> dict[str, Any]:
    """A device map cutting ``model`` into ``num_processes`` roughly equal pieces (0..n-1)."""
    if max_memory is None:
        total, (largest, _) = calculate_maximum_sizes(model)
        value, unit = convert_bytes((total + largest) / num_processes).split(" ")
        share = f"{math.ceil(float(value)) * 1.1} {unit}"
        share = share.replace("bytes", "B").replace("KB", "KiB").replace("MB", "MiB") \
            .replace("GB", "GiB").replace("TB", "TiB")
        max_memory = dict.fromkeys(range(num_processes), share)
    return infer_auto_device_map(model, max_memory=max_memory,
                                 no_split_module_classes=no_split_module_classes,
                                 clean_result=False)


def _check_split_points(model: nn.Module, split_points: Sequence[str]) -> None:
    names = {n for n, _ in model.named_modules()}
    missing = [p for p in split_points if p not in names]
    if missing:
        raise ConfigurationError(f"split_points {missing} are not submodules of "
                                 f"{type(model).__name__}: use names from "
                                 "model.named_modules(), e.g. 'layers.4'.")


def build_pipeline(model: nn.Module, split_points: Sequence[str], args: tuple,
                   kwargs: dict[str, Any] | None, num_chunks: int) -> Any:
    """Trace and split ``model``, keep this process's stage, and return a GPipe schedule."""
    from accel_state import PartialState
    from torch.distributed.pipelining import PipelineStage, ScheduleGPipe, SplitPoint, pipeline

    state = PartialState()
    chunk_args = tuple(a.chunk(num_chunks)[0] if isinstance(a, torch.Tensor) else a for a in args)
    chunk_kwargs = {k: v.chunk(num_chunks)[0] if isinstance(v, torch.Tensor) else v
                    for k, v in (kwargs or {}).items()}
    pipe = pipeline(model, mb_args=chunk_args, mb_kwargs=chunk_kwargs or None,
                    split_spec={p: SplitPoint.BEGINNING for p in split_points})
    if pipe.num_stages != state.num_processes:
        raise ConfigurationError(f"The model splits into {pipe.num_stages} stages but "
                                 f"{state.num_processes} processes run: give "
                                 f"{state.num_processes - 1} split_points.")
    stage: PipelineStage = pipe.build_stage(state.process_index, device=state.device)
    return ScheduleGPipe(stage, n_microbatches=num_chunks)


def find_pippy_batch_size(args: tuple, kwargs: dict[str, Any]) -> int | None:
    """The batch size of the first tensor among the inputs (None when there is none)."""
    for value in (*args, *kwargs.values()):
        found = ignorant_find_batch_size(value)
        if found is not None:
            return found
    return None


def pippy_forward(forward: Any, num_chunks: int, gather_output: bool, *args: Any,
                  **kwargs: Any) -> Any:
    """One pipelined forward: the first process feeds inputs, the last returns the output."""
    from accel_state import PartialState
    from accel_state.operations import broadcast_object_list

    state = PartialState()
    if state.num_processes == 1:
        output = forward(*args, **kwargs)
    elif state.is_main_process:
        batch = find_pippy_batch_size(args, kwargs)
        if batch is not None and batch % num_chunks:
            raise ConfigurationError(f"The batch size {batch} is not divisible by "
                                     f"num_chunks={num_chunks}: pad the batch or change "
                                     "num_chunks.")
        forward(*args, **kwargs)
        output = None
    else:
        output = forward()
        if not state.is_last_process:
            output = None
    if gather_output and state.num_processes > 1:
        holder = [output]
        broadcast_object_list(holder, from_process=state.num_processes - 1)
        output = holder[0]
    return output


def prepare_pippy(model: nn.Module, split_points: str | Sequence[str] = "auto",
                  no_split_module_classes: Sequence[str] | None = None,
                  example_args: tuple = (), example_kwargs: dict[str, Any] | None = None,
                  num_chunks: int | None = None, gather_output: bool = False) -> nn.Module:
    """Split ``model`` into one pipeline stage per process; ``model(...)`` then runs the
    pipeline (call it on every process; inputs matter on the first one).

    ``example_args``/``example_kwargs``: a full batch of example inputs (divisible by
    ``num_chunks``, which defaults to the number of processes), used to trace the model.
    """
    from accel_state import PartialState

    state = PartialState()
    example_args = send_to_device(tuple(example_args), "cpu")
    example_kwargs = send_to_device(dict(example_kwargs or {}), "cpu")
    num_chunks = num_chunks or state.num_processes
    if split_points == "auto" and state.num_processes == 1:
        split_points = []
    elif split_points == "auto":
        device_map = generate_device_map(model, state.num_processes, no_split_module_classes)
        split_points = [next(k for k, v in device_map.items() if v == i)
                        for i in range(1, state.num_processes) if i in device_map.values()]
        split_points = [p.rsplit(".", 1)[0] if not any(
            p == n for n, _ in model.named_modules()) else p for p in split_points]
    else:
        split_points = list(split_points)
    _check_split_points(model, split_points)
    model._original_forward = model.forward
    if state.num_processes == 1:  # nothing to split over: run the model itself
        schedule, step = None, model._original_forward
    else:
        schedule = build_pipeline(model, split_points, example_args, example_kwargs, num_chunks)
        step = schedule.step
    model._original_call = model.__call__
    model.pippy_stage = schedule
    model.hf_split_points = split_points

    def forward(self: nn.Module, *args: Any, **kwargs: Any) -> Any:
        return pippy_forward(step, num_chunks, gather_output, *args, **kwargs)

    model.forward = MethodType(forward, model)
    return model
