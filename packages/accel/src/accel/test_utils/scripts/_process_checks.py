"""Process-level checks of ``test_script``: execution order and decorators, splitting inputs
between processes, RNG synchronisation, and how prepared loaders shard the data.

Each function raises ``AssertionError`` naming what differed; ``test_script.main`` runs them.
"""

from __future__ import annotations

import contextlib
import io
import math
import time
from copy import deepcopy
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset

from accel import Accelerator
from accel.data_loader import prepare_data_loader
from accel.state import AcceleratorState
from accel.test_utils.testing import are_the_same_tensors
from accel.utils import gather, gather_object, synchronize_rng_states

MAIN_FIRST_FILE = Path("check_main_process_first.txt")


def init_state_check() -> None:
    state = AcceleratorState()  # a second construction is the same shared state
    if state.local_process_index == 0:
        print("Testing, testing. 1, 2, 3.")
    print(state)


def _printed(call: Any, *args: Any) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        call(*args)
    return out.getvalue().rstrip()


def process_execution_check() -> None:
    """``main_process_first`` runs the main process's block before the others'; the
    ``on_*`` decorators run the function on exactly the named process."""
    accelerator = Accelerator()
    n = accelerator.num_processes
    with accelerator.main_process_first():
        if accelerator.is_main_process:
            time.sleep(0.1)  # the main process is the slow one, and still first
            line = "Currently in the main process\n"
        else:
            line = "Now on another process\n"
        with MAIN_FIRST_FILE.open("a+") as file:
            file.write(line)
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        text = MAIN_FIRST_FILE.read_text()
        MAIN_FIRST_FILE.unlink()
        assert text.startswith("Currently in the main process\n"), f"main was not first:\n{text}"
        assert text.count("Now on another process\n") == n - 1, f"not one line per rank:\n{text}"
    accelerator.wait_for_everyone()

    state = accelerator.state
    got = _printed(accelerator.on_main_process(lambda: print("main", state.process_index)))
    assert got == ("main 0" if accelerator.is_main_process else ""), got
    got = _printed(accelerator.on_local_main_process(lambda: print("local main")))
    assert got == ("local main" if accelerator.is_local_main_process else ""), got
    got = _printed(accelerator.on_last_process(lambda: print("last", state.process_index)))
    assert got == (f"last {n - 1}" if accelerator.is_last_process else ""), got
    for index in range(n):
        got = _printed(accelerator.on_process(lambda i: print("on", i), process_index=index),
                       index)
        assert got == (f"on {index}" if accelerator.process_index == index else ""), got


def _gathered_in_order(results: Any, length: int) -> list[Any]:
    return gather_object(list(results))[:length]


def split_between_processes_check() -> None:
    """Lists, nested dicts and tensors are cut in rank order, the extra items going to the
    first ranks; ``apply_padding`` repeats the last item so every rank gets as many."""
    state = AcceleratorState()
    n, r = state.num_processes, state.process_index
    with state.split_between_processes(list(range(2 * n))) as mine:
        assert mine == [2 * r, 2 * r + 1], f"rank {r} got {mine}"
    for data in (list(range(2 * n - 1)), list(range(2 * n))):
        with state.split_between_processes(data, apply_padding=True) as mine:
            assert len(mine) == math.ceil(len(data) / n), f"rank {r} got {mine}"
            everyone = _gathered_in_order(mine, len(data))
        assert everyone == data, f"padded split gathered {everyone}, not {data}"

    if n in (1, 2, 4):
        data = {"a": list(range(1, 9)), "b": list("abcdefgh"), "c": torch.arange(1, 9)}
        share = 8 // n
        expected = deepcopy(data)
        with state.split_between_processes(data) as mine:
            assert mine["a"] == expected["a"][r * share:(r + 1) * share], mine
            assert mine["b"] == expected["b"][r * share:(r + 1) * share], mine
            assert torch.equal(mine["c"], expected["c"][r * share:(r + 1) * share]), mine

    if n == 2:
        rows = torch.tensor([[0, 1, 2, 3], [4, 5, 6, 7]]).to(state.device)
        with state.split_between_processes(rows) as mine:
            torch.testing.assert_close(mine, rows[r:r + 1])
    for rows in (torch.arange(2 * n).view(-1, 1), torch.arange(2 * n - 1).view(-1, 1)):
        with state.split_between_processes(rows.to(state.device), apply_padding=True) as mine:
            assert len(mine) == math.ceil(len(rows) / n), f"rank {r} got {mine}"
            everyone = _gathered_in_order([t.cpu() for t in mine], len(rows))
        assert [t.tolist() for t in everyone] == rows.tolist(), everyone

    data = list(range(17))
    with state.split_between_processes(data) as mine:
        base, extra = divmod(len(data), n)
        assert len(mine) == base + (r < extra), f"rank {r} got {len(mine)} of 17"
    state.wait_for_everyone()


def split_datasets_check() -> None:
    """A ``datasets.Dataset`` is split like a list (skipped without ``datasets``)."""
    try:
        from datasets import Dataset as HFDataset
    except ImportError:
        print("Skipped because Hugging Face datasets is not available")
        return
    state = AcceleratorState()
    n = state.num_processes
    odd = HFDataset.from_list([{"k": v} for v in range(2 * n - 1)])
    with state.split_between_processes(odd, apply_padding=False) as mine:
        assert len(mine) == (1 if state.is_last_process else 2), len(mine)
    for data in (odd, HFDataset.from_list([{"k": v} for v in range(2 * n)])):
        with state.split_between_processes(data, apply_padding=True) as mine:
            assert len(mine) == (len(data) if n == 1 else 2), len(mine)
            everyone = _gathered_in_order(mine, len(data))
        assert [row["k"] for row in everyone] == data["k"], everyone
    state.wait_for_everyone()


def rng_sync_check() -> None:
    """``synchronize_rng_states`` copies the main process's torch and generator states."""
    torch.manual_seed(AcceleratorState().process_index)  # start from different states
    synchronize_rng_states(["torch"])
    assert are_the_same_tensors(torch.get_rng_state()), "torch RNG states not synchronised"
    generator = torch.Generator().manual_seed(AcceleratorState().process_index)
    synchronize_rng_states(["generator"], generator=generator)
    assert are_the_same_tensors(generator.get_state()), "generator states not synchronised"
    if AcceleratorState().local_process_index == 0:
        print("All rng are properly synched.")


class _Range(IterableDataset):
    def __init__(self, length: int) -> None:
        self.length = length

    def __iter__(self):
        yield from range(self.length)


def _all_batches(loader: Any) -> torch.Tensor:
    return torch.cat([gather(batch) for batch in loader]).cpu()


def dataloader_sharding_check() -> None:
    """Prepared loaders (sharded, split, dispatched; map-style and iterable) give every
    sample once: in order unshuffled, as a permutation shuffled."""
    state = AcceleratorState()
    length = 32 * state.num_processes
    everything = list(range(length))
    for dispatch in (None, True):
        for split in (False, True):
            for data in (range(length), _Range(length)):
                options = dict(put_on_device=True, split_batches=split,
                               dispatch_batches=dispatch)
                loader = prepare_data_loader(DataLoader(data, batch_size=8), state.device,
                                             state.num_processes, state.process_index,
                                             **options)
                got = _all_batches(loader).tolist()
                assert got == everything, f"{type(data).__name__} {options}: {got}"
            loader = prepare_data_loader(DataLoader(range(length), batch_size=8, shuffle=True),
                                         state.device, state.num_processes,
                                         state.process_index, put_on_device=True,
                                         split_batches=split, dispatch_batches=dispatch)
            got = sorted(_all_batches(loader).tolist())
            assert got == everything, f"shuffled, split={split}, dispatch={dispatch}: {got}"
    if state.local_process_index == 0:
        print("Non-shuffled and shuffled (central) dataloaders passing.")


class _Items(Dataset):
    def __init__(self, data: Any) -> None:
        self.data = data

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int) -> Any:
        return self.data[index]


class _NumpyBatches:
    """A batch sampler of the user's own (not a torch ``BatchSampler``)."""

    def __init__(self, length: int, batch_size: int) -> None:
        self.index = np.arange(length)
        self.batch_size = batch_size

    def __iter__(self):
        yield from np.array_split(np.random.permutation(self.index), len(self))

    def __len__(self) -> int:
        return math.ceil(len(self.index) / self.batch_size)


def custom_sampler_check() -> None:
    """A user's batch sampler is kept (wrapped for sharding, never replaced)."""
    state = AcceleratorState()
    dataset = _Items(range(32 * state.num_processes))
    loader = prepare_data_loader(DataLoader(dataset, batch_sampler=_NumpyBatches(len(dataset), 8)),
                                 state.device, state.num_processes, state.process_index)
    inner = getattr(loader.batch_sampler, "batch_sampler", loader.batch_sampler)
    assert isinstance(inner, _NumpyBatches), f"the batch sampler became {type(inner).__name__}"
