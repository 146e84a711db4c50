"""Debug-mode checks before a collective, and the errors that name the operation.

In debug mode (``ACCEL_DEBUG_MODE=1`` / ``ACCELERATE_DEBUG_MODE=1``, or
``PartialState().debug``) :func:`verify_operation` makes every rank of the operation's group
share the shapes and devices of its input before the collective runs, and every rank raises
:class:`~accel_state.errors.DistributedOperationException` on a mismatch, instead of the job
hanging inside the backend; :func:`chained_operation` names the outer operation in such an
error. The collectives they decorate live in :mod:`accel_state.operations` (which
re-exports both): the exchange here uses torch's ``all_gather_object`` itself, so this
module imports none of them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import torch

from accel_state import env
from accel_state.errors import DistributedOperationException
from accel_state.groups import group_size
from accel_state.structures import get_shape, recursively_apply

__all__ = ["chained_operation", "verify_operation"]

_F = TypeVar("_F", bound=Callable[..., Any])


def _first_tensor_argument(args: tuple, kwargs: dict) -> Any:
    if "tensor" in kwargs:
        return kwargs["tensor"]
    return args[0] if args else None


def _check_devices(operation: str, data: Any) -> str | None:
    """A message when a tensor sits on a device the backend cannot use (e.g. CPU with NCCL)."""
    config = str(torch.distributed.get_backend_config())  # e.g. "cpu:gloo,cuda:nccl"
    if ":" not in config:
        return None
    leaves: list[torch.Tensor] = []
    recursively_apply(leaves.append, data, error_on_other_type=False)
    for leaf in leaves:
        kind = leaf.device.type
        if f"{kind}:" not in config:
            return (f"a tensor passed to `{operation}` is on {kind!r}, which the process-group "
                    f"backend ({config}) cannot use; move it to the training device first.")
    return None


def _debug_mode() -> bool:
    """``PartialState().debug`` once the state exists (Accelerate's switch, which a script may
    flip at run time), else ``ACCELERATE_DEBUG_MODE`` (which the state starts from)."""
    from accel_state.state import PartialState

    shared = PartialState._shared_state
    if "debug" in shared:
        return bool(shared["debug"])
    return env.DEBUG_MODE.get_bool(False)


def verify_operation(function: _F) -> _F:
    """Decorator: in debug mode, compare input shapes across ranks before ``function`` runs.

    The first argument (or ``tensor=``) is checked. Every rank of the operation's
    ``group=`` (the default group without one) takes part in the check and every rank
    raises on a mismatch, so nothing is left waiting in a collective.
    """

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        group = kwargs.get("group")
        if group_size(group) == 1 or not _debug_mode():
            return function(*args, **kwargs)
        operation = f"{function.__module__}.{function.__name__}"
        data = _first_tensor_argument(args, kwargs)
        report = {"shapes": get_shape(data), "device": _check_devices(operation, data)}
        reports: list[Any] = [None] * group_size(group)
        torch.distributed.all_gather_object(reports, report, group=group)
        problems = [f"Process {i}: {r['device']}" for i, r in enumerate(reports) if r["device"]]
        if problems:
            raise DistributedOperationException(
                f"Cannot apply `{operation}`: tensors are on the wrong device.\n  - "
                + "\n  - ".join(problems))
        shapes = [r["shapes"] for r in reports]
        if any(s != shapes[0] for s in shapes):
            listing = "\n  - ".join(f"Process {i}: {s}" for i, s in enumerate(shapes))
            raise DistributedOperationException(
                f"Cannot apply `{operation}`: the input shapes differ across processes, and "
                f"every process must pass the same shapes (pad with `pad_across_processes` "
                f"first when only the batch size differs).\n\nOperation: `{operation}`\n"
                f"Input shapes:\n  - {listing}")
        return function(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def chained_operation(function: _F) -> _F:
    """Decorator: re-raise a :class:`DistributedOperationException` naming this outer operation."""

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except DistributedOperationException as error:
            operation = f"{function.__module__}.{function.__name__}"
            raise DistributedOperationException(
                f"Error found while calling `{operation}`: {error}") from error

    return wrapper  # type: ignore[return-value]
