"""The data-order grid behind ``accelerate_1_15_order.json.gz``: which indices each rank sees
and how the global RNG and the user's generator are consumed, per case.

Run as a script with Hugging Face Accelerate first on ``PYTHONPATH`` to (re)make the golden
file (``make`` below checks that the real Accelerate is the one imported)::

    pip install --no-deps --target /tmp/real_accelerate accelerate==1.15.0
    PYTHONPATH=/tmp/real_accelerate .venv/bin/python \\
        packages/accel-data/tests/data/order_grid.py

``tests/test_order_golden.py`` runs the same grid through ``accel_data`` and compares.
Every process of a multi-process run is simulated the way a real one starts: same
``torch.manual_seed``, a fresh DataLoader, ``prepare_data_loader(num_processes=N,
process_index=i)``.
"""

from __future__ import annotations

import gzip
import hashlib
import itertools
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset

GOLDEN = Path(__file__).with_name("accelerate_1_15_order.json.gz")

# (shuffle, generator seed or None, use_seedable_sampler, data_seed, call set_epoch)
SAMPLERS = [
    (False, None, False, None, False),
    (True, None, False, None, False),
    (True, 123, False, None, False),
    (True, None, True, None, False),
    (True, 123, True, None, False),
    (True, None, True, 7, False),
    (True, 123, True, 7, True),
    (True, None, True, None, True),
    (True, None, False, 7, False),  # data_seed without the seedable sampler
]
# (dataset length, batch size): divisible, a short last batch, fewer samples than
# processes x batch, and a batch size that does not split over 2 or 4 processes
SIZES = ((16, 4), (13, 4), (5, 4), (13, 3))
WORLDS = (1, 2, 4)


class Indices(Dataset):
    """Item ``i`` is ``i``: batches read as the indices they hold."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> int:
        return index


def _digest(state: torch.Tensor) -> str:
    return hashlib.sha1(bytes(state.contiguous().tolist())).hexdigest()[:12]


def _rng(generator: torch.Generator | None) -> dict[str, str]:
    out = {"global": _digest(torch.get_rng_state())}
    if generator is not None:
        out["user"] = _digest(generator.get_state())
    return out


def run_case(prepare: Callable[..., Any], case: dict[str, Any]) -> dict[str, Any]:
    """One simulated rank: batches of two epochs and the RNG digests after each stage."""
    torch.manual_seed(0)
    generator = None
    if case["generator"] is not None:
        generator = torch.Generator()
        generator.manual_seed(case["generator"])
    loader = DataLoader(Indices(case["length"]), batch_size=case["batch_size"],
                        shuffle=case["shuffle"], drop_last=case["drop_last"],
                        generator=generator)
    try:
        prepared = prepare(loader, num_processes=case["num_processes"],
                           process_index=case["process_index"],
                           split_batches=case["split_batches"],
                           even_batches=case["even_batches"],
                           use_seedable_sampler=case["use_seedable_sampler"],
                           data_seed=case["data_seed"])
    except Exception as error:  # the golden records which cases Accelerate refuses
        return {"error": type(error).__name__, "message": str(error)}
    record: dict[str, Any] = {"len": len(prepared), "rng": [_rng(generator)], "epochs": []}
    for epoch in range(2):
        if case["set_epoch"]:
            prepared.set_epoch(epoch)
        record["epochs"].append([batch.tolist() for batch in prepared])
        record["rng"].append(_rng(generator))
    return record


def cases() -> list[dict[str, Any]]:
    """Every case of the grid, one per simulated rank."""
    out = []
    grid = itertools.product(SIZES, SAMPLERS, (False, True), (True, False), (False, True),
                             WORLDS)
    for (length, size), sampler, split, even, drop, world in grid:
        shuffle, gen, seedable, data_seed, set_epoch = sampler
        for rank in range(world):
            out.append({"length": length, "batch_size": size, "shuffle": shuffle,
                        "generator": gen, "use_seedable_sampler": seedable,
                        "data_seed": data_seed, "set_epoch": set_epoch,
                        "split_batches": split, "even_batches": even, "drop_last": drop,
                        "num_processes": world, "process_index": rank})
    return out


def key(case: dict[str, Any]) -> str:
    return json.dumps(case, sort_keys=True)


def run_grid(prepare: Callable[..., Any]) -> dict[str, Any]:
    return {key(case): run_case(prepare, case) for case in cases()}


def load() -> dict[str, Any]:
    """The golden file's cases."""
    return json.loads(gzip.decompress(GOLDEN.read_bytes()))["cases"]


def make() -> None:
    import accelerate
    from accelerate.data_loader import prepare_data_loader

    if "accel" in Path(accelerate.__file__).parts or accelerate.__version__ != "1.15.0":
        sys.exit(f"not Hugging Face Accelerate 1.15.0: {accelerate.__file__} "
                 f"({accelerate.__version__}); put it first on PYTHONPATH")
    results = run_grid(prepare_data_loader)
    payload = {"accelerate": accelerate.__version__, "torch": torch.__version__,
               "cases": results}
    text = json.dumps(payload, sort_keys=True, indent=0)
    GOLDEN.write_bytes(gzip.compress(text.encode(), mtime=0))
    print(f"{len(results)} cases -> {GOLDEN}")


if __name__ == "__main__":
    make()
