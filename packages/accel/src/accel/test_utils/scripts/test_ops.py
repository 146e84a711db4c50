"""The collectives of ``accel.utils.operations`` across the launched processes.

accel's own version of the check Accelerate bundles at this path (started with
``accelerate launch .../test_ops.py``, no arguments). Rank ``r`` of ``n`` holds
``[1 + r*n, ..., n + r*n]``, so every result is known in advance:

* ``gather`` concatenates in rank order (a non-contiguous tensor too); ``gather_object``
  lists one object per rank; ``broadcast`` and ``broadcast_object_list`` copy rank 0's;
* ``pad_across_processes`` pads the shorter tensors with zeros (at the end, or first);
* ``reduce`` sums, averages and takes the maximum; ``copy_tensor_to_devices`` sends the
  main process's tensor to the others, ``gather_tensor_shape`` the shape and dtype code
  of the tensor only the last process holds;
* in debug mode (``PartialState().debug``, ``ACCELERATE_DEBUG_MODE=1``) an operation whose
  inputs disagree in shape across ranks raises ``DistributedOperationException`` on every
  rank instead of hanging or mixing data.

Any failure raises (exit status non-zero).
"""

from __future__ import annotations

import torch

from accel import PartialState
from accel.test_utils.testing import assert_exception
from accel.utils.operations import (
    DistributedOperationException,
    broadcast,
    broadcast_object_list,
    copy_tensor_to_devices,
    gather,
    gather_object,
    gather_tensor_shape,
    pad_across_processes,
    reduce,
)


def rank_tensor(state: PartialState) -> torch.Tensor:
    n = state.num_processes
    return (torch.arange(n) + 1.0 + n * state.process_index).to(state.device)


def check_gather(state: PartialState) -> None:
    got = gather(rank_tensor(state)).tolist()
    assert got == list(range(1, state.num_processes ** 2 + 1)), f"gather gave {got}"
    transposed = torch.arange(12, device=state.device).view(4, 3).t()
    assert not transposed.is_contiguous()
    got = gather(transposed)
    expected = torch.cat([transposed] * state.num_processes)
    assert torch.equal(got, expected), f"gather of a non-contiguous tensor gave {got}"


def check_gather_object(state: PartialState) -> None:
    got = gather_object([state.process_index])
    assert got == list(range(state.num_processes)), f"gather_object gave {got}"


def check_broadcast(state: PartialState) -> None:
    got = broadcast(rank_tensor(state))
    assert got.shape == (state.num_processes,), got.shape
    assert got.tolist() == list(range(1, state.num_processes + 1)), f"broadcast gave {got}"
    objects = [f"from {state.process_index}", {"rank": state.process_index}]
    broadcast_object_list(objects, from_process=0)
    assert objects == ["from 0", {"rank": 0}], f"broadcast_object_list gave {objects}"


def check_pad_across_processes(state: PartialState) -> None:
    n = state.num_processes
    longest = n + 1 if n > 1 else n
    tensor = torch.arange(longest if state.is_main_process else n).to(state.device)
    padded = pad_across_processes(tensor)
    assert padded.shape == (longest,), padded.shape
    expected = list(range(n)) + [0] * (longest - n)
    if not state.is_main_process:
        assert padded.tolist() == expected, f"padded to {padded.tolist()}, not {expected}"
    first = pad_across_processes(tensor, pad_first=True)
    if not state.is_main_process:
        expected = [0] * (longest - n) + list(range(n))
        assert first.tolist() == expected, f"pad_first gave {first.tolist()}, not {expected}"
    rows = torch.ones(state.process_index + 2, 3, device=state.device)
    padded = pad_across_processes(rows, pad_index=-1)
    assert padded.shape == (n + 1, 3), padded.shape
    assert torch.all(padded[state.process_index + 2:] == -1), "pad_index not used"


def check_reduce(state: PartialState) -> None:
    n, r = state.num_processes, state.process_index
    values = torch.stack([torch.arange(n) + 1.0 + n * k for k in range(n)]).to(state.device)
    expected = {"sum": values.sum(0), "mean": values.mean(0), "max": values.max(0).values}
    for reduction, want in expected.items():
        got = reduce(rank_tensor(state), reduction)
        assert torch.allclose(got, want), f"reduce {reduction!r} on rank {r}: {got} != {want}"
    if n == 2:  # Accelerate's numbers for two processes
        assert reduce(rank_tensor(state), "sum").tolist() == [4.0, 6.0]
        assert reduce(rank_tensor(state), "mean").tolist() == [2.0, 3.0]
        assert reduce(rank_tensor(state), "max").tolist() == [3.0, 4.0]


def check_copy_tensor_to_devices(state: PartialState) -> None:
    mine = torch.tensor([1, 2, 3], dtype=torch.int).to(state.device)
    got = copy_tensor_to_devices(mine if state.is_main_process else None)
    assert torch.equal(got, mine), f"copy_tensor_to_devices gave {got}"
    last = torch.zeros(2, 3, dtype=torch.bfloat16)
    shape, code = gather_tensor_shape(last if state.is_last_process else None)
    assert shape.tolist() == [2, 3] and code == 4, f"gather_tensor_shape gave {shape}, {code}"


def check_mismatched_shapes_raise(state: PartialState) -> None:
    """Debug mode: shapes that differ across ranks fail every rank with a named error."""
    if state.num_processes == 1:
        return
    state.debug = True
    try:
        row = torch.tensor([[0.0, 1, 2, 3, 4]]).to(state.device)
        other_rank = {
            "pad_across_processes": torch.tensor([[[0.0, 1, 2, 3, 4, 5]]]),
            "reduce": torch.tensor([[[0.0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]]),
            "broadcast": torch.tensor([[[0.0, 1, 2, 3, 4], [5, 6, 7, 8, 9]]]),
        }
        calls = {"pad_across_processes": lambda d: pad_across_processes(d, dim=0),
                 "reduce": reduce, "broadcast": broadcast}
        for name, call in calls.items():
            mine = row if state.process_index == 0 else other_rank[name].to(state.device)
            with assert_exception(DistributedOperationException):
                call({"tensor": mine})
    finally:
        state.debug = False


CHECKS = (("gather", check_gather), ("gather_object", check_gather_object),
          ("broadcast", check_broadcast), ("pad_across_processes", check_pad_across_processes),
          ("reduce sum/mean/max", check_reduce), ("op_checker", check_mismatched_shapes_raise),
          ("sending tensors across devices", check_copy_tensor_to_devices))


def main() -> None:
    state = PartialState()
    state.print(f"State: {state}")
    for name, check in CHECKS:
        state.print(f"testing {name}")
        check(state)
    state.destroy_process_group()


if __name__ == "__main__":
    main()
