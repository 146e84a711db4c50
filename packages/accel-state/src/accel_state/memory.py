"""Device memory helpers with Accelerate's names (``accelerate.utils.memory``).

``find_executable_batch_size`` retries a training function with a smaller batch size each
time it runs out of memory — the way scripts find the largest batch that fits without
guessing. ``release_memory`` / ``clear_device_cache`` hand cached accelerator memory back
between attempts (or between two models in one process).
"""

from __future__ import annotations

import functools
import gc
import inspect
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["clear_device_cache", "release_memory", "should_reduce_batch_size",
           "find_executable_batch_size"]

# the messages torch raises when an allocation fails (" out of memory.": CUDA, HIP, XPU, ...;
# cuDNN workspaces, the CPU allocator, MPS, Gaudi's device memory)
_OOM_MESSAGES = (" out of memory.", "cuDNN error: CUDNN_STATUS_NOT_SUPPORTED.",
                 "DefaultCPUAllocator: can't allocate memory", "MPS backend out of memory",
                 "FATAL ERROR :: MODULE:PT_DEVMEM Allocation failed")
#: each out-of-memory retry runs with this fraction of the failed batch size (Accelerate 1.x)
_REDUCTION = 0.9


def clear_device_cache(garbage_collection: bool = False) -> None:
    """Return the cached memory of every available accelerator to its driver (after an
    optional garbage collection, so tensors only cycles still hold are freed first)."""
    if garbage_collection:
        gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    xpu = getattr(torch, "xpu", None)
    if xpu is not None and xpu.is_available():
        xpu.empty_cache()
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        torch.mps.empty_cache()


def release_memory(*objects: Any) -> list[None]:
    """Drop these references and free the device cache. Use as
    ``model, optimizer = release_memory(model, optimizer)`` (the caller's names then hold
    None, so nothing keeps the tensors alive)."""
    released: list[None] = [None] * len(objects)
    del objects
    clear_device_cache(garbage_collection=True)
    return released


def should_reduce_batch_size(exception: BaseException) -> bool:
    """Whether ``exception`` is an out-of-memory failure a smaller batch may avoid."""
    if isinstance(exception, torch.cuda.OutOfMemoryError):
        return True
    return isinstance(exception, RuntimeError) and len(exception.args) == 1 and any(
        message in str(exception.args[0]) for message in _OOM_MESSAGES)


def find_executable_batch_size(function: Callable[..., Any] | None = None,
                               starting_batch_size: int = 128,
                               reduce_batch_size_fn: Callable[[], int] | None = None
                               ) -> Any:
    """Decorator: call ``function(batch_size, *args, **kwargs)`` with ``starting_batch_size``,
    and again with a smaller one (90 % of it, rounded down, or ``reduce_batch_size_fn()``:
    128, 115, 103, ...) each time it fails for lack of memory, clearing the device cache in
    between. Other errors are raised as they are. The decorated function is called without
    its first argument: the decorator supplies it.

    As in Accelerate, the decorated function remembers the size it reached: a second call
    starts from the batch size the first one ended with, not from ``starting_batch_size``.
    A call that reaches zero (also ``starting_batch_size=0``) raises ``RuntimeError``.
    """
    if function is None:
        return functools.partial(find_executable_batch_size,
                                 starting_batch_size=starting_batch_size,
                                 reduce_batch_size_fn=reduce_batch_size_fn)
    if (not isinstance(starting_batch_size, int) or isinstance(starting_batch_size, bool)
            or starting_batch_size < 0):
        raise ValueError(f"find_executable_batch_size(starting_batch_size={starting_batch_size!r})"
                         " must be an int >= 0: the number of samples to try first.")
    batch_size = starting_batch_size

    @functools.wraps(function)
    def decorator(*args: Any, **kwargs: Any) -> Any:
        nonlocal batch_size
        clear_device_cache(garbage_collection=True)
        params = list(inspect.signature(function).parameters)
        if len(params) < len(args) + 1:
            pairs = zip(params[1:], args[1:], strict=False)  # the arguments after the size
            shown = ", ".join(f"{name}={value!r}" for name, value in pairs)
            raise TypeError(
                f"Batch size was passed into `{function.__name__}` as the first argument when "
                f"called. Remove it, as the decorator already does so: "
                f"`{function.__name__}({shown})`")
        while True:
            if batch_size == 0:
                raise RuntimeError("No executable batch size found, reached zero.")
            try:
                return function(batch_size, *args, **kwargs)
            except Exception as exc:
                if not should_reduce_batch_size(exc):
                    raise
                clear_device_cache(garbage_collection=True)
                batch_size = (reduce_batch_size_fn() if reduce_batch_size_fn
                              else int(batch_size * _REDUCTION))

    return decorator
