"""Multi-process checks of accel_state's collectives and RNG helpers, with real data.

``run_ops_checks(rank, world_size)`` expects a gloo process group ALREADY initialised
with ``world_size >= 2`` and is called on every rank. Each rank passes different
values, so a collective that mixed ranks up, dropped one, or returned this rank's
input would fail an assertion. Debug-mode checks make sure a shape mismatch raises
``DistributedOperationException`` on every rank and leaves the group usable.
"""

from __future__ import annotations

import contextlib
import random
import warnings
from collections import namedtuple

import torch
import torch.distributed as dist

from accel_state import env
from accel_state.errors import DistributedOperationException
from accel_state.operations import (
    CannotPadNestedTensorWarning,
    GatheredParameters,
    broadcast,
    broadcast_object_list,
    copy_tensor_to_devices,
    gather,
    gather_object,
    pad_across_processes,
    reduce,
    send_to_device,
)
from accel_state.random import (
    capture_rng_state,
    restore_rng_state,
    set_seed,
    synchronize_rng_state,
    synchronize_rng_states,
)
from accel_state.state import PartialState

Pair = namedtuple("Pair", ["left", "right"])


def _ranks(world_size: int) -> range:
    return range(world_size)


def check_gather(rank: int, world_size: int) -> None:
    ranks = _ranks(world_size)
    # plain 2-D float, one row per rank
    out = gather(torch.full((1, 3), float(rank)))
    assert out.shape == (world_size, 3), out.shape
    assert out[:, 0].tolist() == [float(r) for r in ranks], out
    # several rows per rank, int64, non-contiguous input (a transposed view)
    mat = (torch.arange(6).reshape(3, 2) + 100 * rank).t()
    assert not mat.is_contiguous()
    out = gather(mat)
    assert out.shape == (2 * world_size, 3)
    for r in ranks:
        assert torch.equal(out[2 * r:2 * r + 2], (torch.arange(6).reshape(3, 2) + 100 * r).t())
    # 0-d tensors become one value per rank
    out = gather(torch.tensor(rank * 1.5))
    assert out.tolist() == [r * 1.5 for r in ranks], out
    # nested dict / tuple / namedtuple with mixed dtypes keeps its structure
    data = {"a": torch.tensor([rank]), "b": (torch.tensor([[rank, rank]], dtype=torch.bfloat16),
                                             Pair(torch.tensor([rank == 0]),
                                                  torch.tensor([rank * 10, rank * 10 + 1])))}
    out = gather(data)
    assert isinstance(out, dict) and isinstance(out["b"], tuple)
    assert isinstance(out["b"][1], Pair)
    assert out["a"].tolist() == list(ranks)
    assert out["b"][0].dtype == torch.bfloat16 and out["b"][0].shape == (world_size, 2)
    assert out["b"][1].left.tolist() == [r == 0 for r in ranks]
    assert out["b"][1].right.tolist() == [v for r in ranks for v in (r * 10, r * 10 + 1)]
    # non-tensor leaves are refused (on every rank alike)
    try:
        gather({"a": torch.ones(1), "b": "text"})
    except TypeError as error:
        assert "str" in str(error)
    else:
        raise AssertionError("gather accepted a string leaf")


def check_gather_object(rank: int, world_size: int) -> None:
    ranks = _ranks(world_size)
    # lists are concatenated in rank order (Accelerate's behaviour)
    out = gather_object([f"item-{rank}-a", f"item-{rank}-b"])
    assert out == [f"item-{r}-{s}" for r in ranks for s in "ab"], out
    out = gather_object([{"rank": rank, "tags": {rank}}])
    assert out == [{"rank": r, "tags": {r}} for r in ranks], out
    # non-list objects come back one per rank
    out = gather_object({"rank": rank, "payload": (rank, None)})
    assert out == [{"rank": r, "payload": (r, None)} for r in ranks], out
    out = gather_object(f"text{rank}")
    assert out == [f"text{r}" for r in ranks], out
    # uneven list lengths are fine
    out = gather_object(list(range(rank + 1)))
    assert out == [i for r in ranks for i in range(r + 1)], out


def check_broadcast(rank: int, world_size: int) -> None:
    last = world_size - 1
    data = {"x": torch.full((2, 2), float(rank)),
            "y": [torch.tensor([rank, rank + 1]), Pair(torch.tensor(rank), torch.zeros(1) + rank)]}
    out = broadcast(data, from_process=last)
    assert out is not data and out["x"] is data["x"]  # in place, structure rebuilt
    assert torch.equal(out["x"], torch.full((2, 2), float(last)))
    assert out["y"][0].tolist() == [last, last + 1]
    assert isinstance(out["y"][1], Pair) and out["y"][1].left.item() == last
    out = broadcast(torch.arange(3) + rank)
    assert out.tolist() == [0, 1, 2]
    objects = [f"from-{rank}", {"rank": rank}, None]
    result = broadcast_object_list(objects, from_process=last)
    assert result is objects
    assert objects == [f"from-{last}", {"rank": last}, None], objects


def check_reduce(rank: int, world_size: int) -> None:
    total = sum(_ranks(world_size))
    value = torch.tensor([float(rank), 1.0])
    out = reduce(value, reduction="sum")
    assert out.tolist() == [float(total), float(world_size)], out
    assert value.tolist() == [float(rank), 1.0], "reduce modified its input"
    out = reduce(value)  # mean is the default
    assert torch.allclose(out, torch.tensor([total / world_size, 1.0]))
    out = reduce(value, reduction="none")  # Accelerate: summed, not divided
    assert out.tolist() == [float(total), float(world_size)]
    out = reduce(value, reduction="sum", scale=0.5)
    assert out.tolist() == [total / 2, world_size / 2]
    out = reduce(value, reduction="max")  # element-wise maximum over the ranks
    assert out.tolist() == [float(world_size - 1), 1.0], out
    out = reduce({"i": torch.tensor([rank, 2]), "t": (torch.tensor(float(rank)),)}, "mean")
    assert out["i"].is_floating_point() and torch.allclose(
        out["i"], torch.tensor([total / world_size, 2.0]))
    assert isinstance(out["t"], tuple) and out["t"][0].ndim == 0


def check_pad_across_processes(rank: int, world_size: int) -> None:
    ranks = _ranks(world_size)
    longest = world_size  # rank r has r + 1 rows
    local = torch.full((rank + 1, 2), rank + 1)
    padded = pad_across_processes(local)
    assert padded.shape == (longest, 2)
    assert padded[: rank + 1].eq(rank + 1).all() and padded[rank + 1:].eq(0).all()
    gathered = gather(padded)
    assert gathered.shape == (world_size * longest, 2)
    for r in ranks:
        block = gathered[r * longest:(r + 1) * longest, 0]
        assert block.tolist() == [r + 1] * (r + 1) + [0] * (longest - r - 1), block
    # pad_first with a pad_index, along the last dim of a nested structure
    seq = {"ids": torch.ones(2, rank + 2, dtype=torch.long), "mask": [torch.ones(1, 3)]}
    out = pad_across_processes(seq, dim=-1, pad_index=-100, pad_first=True)
    width = world_size + 1
    assert out["ids"].shape == (2, width)
    assert out["ids"][0].tolist() == [-100] * (width - rank - 2) + [1] * (rank + 2)
    assert out["mask"][0].shape == (1, 3) and out["mask"][0] is seq["mask"][0]
    # dim beyond a tensor's rank: unchanged, and no hang even if others have that dim
    scalar = torch.tensor(float(rank))
    assert pad_across_processes(scalar) is scalar
    mixed = pad_across_processes([torch.zeros(rank + 1, 2), torch.tensor(3.0)], dim=1)
    assert mixed[0].shape == (rank + 1, 2) and mixed[1].item() == 3.0
    # nested tensors are returned as they are, with a warning, and do not block the others
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "nested tensors are a prototype"
        nested = torch.nested.nested_tensor([torch.ones(rank + 1), torch.ones(2)])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = pad_across_processes([nested, torch.ones(rank + 1)])
    assert out[0] is nested and out[1].shape == (longest,)
    assert any(issubclass(w.category, CannotPadNestedTensorWarning) for w in caught)


def check_copy_tensor_to_devices(rank: int, world_size: int) -> None:
    owner = world_size - 1
    source = torch.arange(6, dtype=torch.float64).reshape(2, 3) * 7 if rank == owner else None
    out = copy_tensor_to_devices(source)
    assert out.dtype == torch.float64 and out.shape == (2, 3)
    assert torch.equal(out, torch.arange(6, dtype=torch.float64).reshape(2, 3) * 7)
    # several owners: the lowest rank's tensor wins, whatever the others' shapes
    out = copy_tensor_to_devices(torch.full((rank + 1,), rank, dtype=torch.int32))
    assert out.tolist() == [0] and out.dtype == torch.int32, out


def _expect_everywhere(operation, *args, **kwargs) -> str:
    try:
        operation(*args, **kwargs)
    except DistributedOperationException as error:
        return str(error)
    raise AssertionError(f"{operation.__name__} did not raise on a shape mismatch")


@contextlib.contextmanager
def debug_mode(on: bool):
    """Debug mode as Accelerate switches it: ``PartialState().debug`` once the state exists
    (read at each collective), else ``ACCEL_DEBUG_MODE`` (which a new state starts from)."""
    shared = PartialState._shared_state
    before = shared.get("debug")
    with env.patch_environment(ACCEL_DEBUG_MODE="1" if on else "0"):
        if "debug" in shared:
            shared["debug"] = on
        try:
            yield
        finally:
            if "debug" in shared:
                shared["debug"] = before


def check_debug_mode(rank: int, world_size: int) -> None:
    with debug_mode(True):
        # matching shapes pass through the check
        assert gather(torch.ones(2, 2) * rank).shape == (2 * world_size, 2)
        bad = torch.ones(rank + 1, 3)
        message = _expect_everywhere(gather, bad)
        for r in _ranks(world_size):
            assert f"Process {r}: [{r + 1}, 3]" in message, message
        assert "operations.gather" in message
        message = _expect_everywhere(reduce, {"x": bad})
        assert "Process 0: {'x': [1, 3]}" in message, message
        _expect_everywhere(broadcast, bad, from_process=0)
        # pad_across_processes fixes batch sizes, but not differing ranks of tensors
        ok = pad_across_processes(bad)
        assert ok.shape == (world_size, 3)
        wrong_ndim = torch.ones(2, 2) if rank == 0 else torch.ones(2, 2, 1)
        message = _expect_everywhere(pad_across_processes, wrong_ndim)
        assert "pad_across_processes" in message and "dimensions" in message, message
        # a different number of tensors: caught by the inner, verified gather
        structure = [torch.ones(1)] * (rank + 1)
        message = _expect_everywhere(pad_across_processes, structure)
        assert "pad_across_processes" in message, message
    # the group still works after all those refusals
    dist.barrier()
    assert gather(torch.tensor([rank])).tolist() == list(_ranks(world_size))
    with debug_mode(False):
        assert reduce(torch.ones(1), "sum").item() == world_size


def check_rng(rank: int, world_size: int) -> None:
    # device_specific seeds differ per rank; plain seeds agree
    set_seed(1234, device_specific=True)
    draws = gather_object([torch.rand(3).tolist()])
    assert len({tuple(d) for d in draws}) == world_size, draws
    set_seed(1234)
    draws = gather_object([(torch.rand(3).tolist(), random.random())])
    assert all(d == draws[0] for d in draws), draws
    # synchronisation hands rank 0's state to everyone
    torch.manual_seed(100 + rank)
    generator = torch.Generator().manual_seed(200 + rank)
    synchronize_rng_states(["torch", "generator"], generator=generator)
    draws = gather_object([(torch.rand(2).tolist(), torch.rand(2, generator=generator).tolist())])
    assert all(d == draws[0] for d in draws), draws
    torch.manual_seed(100)
    assert draws[0][0] == torch.rand(2).tolist()
    torch.manual_seed(300 + rank)
    synchronize_rng_state("torch")
    draws = gather_object([torch.randint(0, 10**9, (2,)).tolist()])
    assert all(d == draws[0] for d in draws), draws
    # capture / restore is per process and exact
    set_seed(7, device_specific=True)
    saved = capture_rng_state()
    first = (torch.rand(4), random.random())
    restore_rng_state(saved)
    second = (torch.rand(4), random.random())
    assert torch.equal(first[0], second[0]) and first[1] == second[1]


def check_misc(rank: int, world_size: int) -> None:
    batch = {"x": torch.ones(2) * rank, "meta": ["a"]}
    moved = send_to_device(batch, "cpu")
    assert torch.equal(moved["x"], batch["x"]) and moved["meta"] == ["a"]
    layer = torch.nn.Linear(2, 2)
    with GatheredParameters(layer.parameters(), modifier_rank=0):
        layer.weight.data.fill_(float(rank))  # a no-op context outside ZeRO-3
    assert layer.weight.eq(float(rank)).all()


CHECKS = [check_gather, check_gather_object, check_broadcast, check_reduce,
          check_pad_across_processes, check_copy_tensor_to_devices, check_debug_mode,
          check_rng, check_misc]


def run_ops_checks(rank: int, world_size: int) -> None:
    """Run every check above on this rank; raises ``AssertionError`` naming the failing one."""
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError("run_ops_checks needs an initialised process group.")
    if dist.get_world_size() != world_size or dist.get_rank() != rank or world_size < 2:
        raise RuntimeError(f"run_ops_checks got rank={rank}, world_size={world_size}, but the "
                           f"group has rank {dist.get_rank()} of {dist.get_world_size()} "
                           "(and needs at least 2 processes).")
    with env.patch_environment(ACCEL_DEBUG_MODE="0"):
        for check in CHECKS:
            try:
                check(rank, world_size)
            except AssertionError as error:
                raise AssertionError(f"[rank {rank}] {check.__name__} failed: {error}") from error
            dist.barrier()
