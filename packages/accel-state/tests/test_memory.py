"""find_executable_batch_size and release_memory (Accelerate's accelerate.utils.memory)."""

from __future__ import annotations

import pytest
import torch
from accel_state.memory import (
    find_executable_batch_size,
    release_memory,
    should_reduce_batch_size,
)


def _oom() -> RuntimeError:
    return RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 1 GB")


def test_shrinks_the_batch_size_by_a_tenth_until_the_function_fits():
    tried = []

    @find_executable_batch_size(starting_batch_size=128)
    def train(batch_size, lr, *, steps):
        tried.append(batch_size)
        if batch_size > 80:
            raise _oom()
        return batch_size, lr, steps

    assert train(0.1, steps=3) == (73, 0.1, 3)
    assert tried == [128, 115, 103, 92, 82, 73]  # int(size * 0.9) each time, as Accelerate 1.x


def test_custom_reduction_other_errors_and_reaching_zero():
    sizes = iter([10, 0])

    @find_executable_batch_size(starting_batch_size=20, reduce_batch_size_fn=lambda: next(sizes))
    def always_oom(batch_size):
        raise torch.cuda.OutOfMemoryError("CUDA out of memory.")

    with pytest.raises(RuntimeError, match="No executable batch size found, reached zero"):
        always_oom()

    @find_executable_batch_size
    def broken(batch_size):
        raise ValueError("a real bug")

    with pytest.raises(ValueError, match="a real bug"):  # not retried
        broken()


def test_passing_the_batch_size_yourself_is_named():
    @find_executable_batch_size(starting_batch_size=8)
    def train(batch_size, lr):
        return batch_size

    with pytest.raises(TypeError, match=r"Batch size was passed into `train`.*`train\(lr=0.1\)`"):
        train(32, 0.1)
    with pytest.raises(ValueError, match="starting_batch_size=-1"):
        find_executable_batch_size(lambda b: b, starting_batch_size=-1)


def test_starting_batch_size_zero_raises_when_called_as_accelerate_does():
    calls = []
    train = find_executable_batch_size(lambda batch_size: calls.append(batch_size),
                                       starting_batch_size=0)  # decorating is fine
    with pytest.raises(RuntimeError, match="No executable batch size found, reached zero"):
        train()
    assert calls == []  # the function never ran


def test_a_second_call_starts_from_the_size_the_first_reached():
    tried = []

    @find_executable_batch_size(starting_batch_size=10)
    def train(batch_size):
        tried.append(batch_size)
        if batch_size > 8:
            raise _oom()
        return batch_size

    assert train() == 8
    assert train() == 8
    assert tried == [10, 9, 8, 8]  # Accelerate keeps the reduced size in the decorator


def test_out_of_memory_is_recognised():
    assert should_reduce_batch_size(_oom())
    assert should_reduce_batch_size(torch.cuda.OutOfMemoryError("CUDA out of memory."))
    for message in ("HIP out of memory.", "XPU out of memory. Tried to allocate 2 GiB",
                    "FATAL ERROR :: MODULE:PT_DEVMEM Allocation failed"):
        assert should_reduce_batch_size(RuntimeError(message)), message
    assert not should_reduce_batch_size(RuntimeError("shape mismatch"))
    assert not should_reduce_batch_size(KeyError("x"))


def test_release_memory_returns_one_none_per_object():
    model, optimizer = torch.nn.Linear(2, 2), object()
    model, optimizer = release_memory(model, optimizer)
    assert model is None and optimizer is None


def test_release_memory_edge_cases_match_accelerate():
    assert release_memory() == []  # nothing passed: an empty list
    released = release_memory("text", 3, None, [torch.ones(2)])  # any objects, not only tensors
    assert released == [None, None, None, None] and isinstance(released, list)
