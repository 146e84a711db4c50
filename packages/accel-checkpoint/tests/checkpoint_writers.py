"""RankCheckpointWriters of the tests' own, as a strategy (an engine) would hand them over.

One home for accel-checkpoint's tests (test_per_rank.py, test_layouts.py; this folder is
put on ``sys.path`` by conftest.py) and the integration tests
(tests/integration/test_checkpoint_layouts.py, scripts/checkpoint_per_rank.py).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from accel_checkpoint.tree import flatten_state, unflatten_state
from safetensors.torch import load_file, save_file


class SafetensorsWriter:
    """Each rank's models and optimizers in ``rank{r}.safetensors`` + ``rank{r}.json``."""

    layout = "test-safetensors"
    unpickles = "never"

    def __init__(self, fail_on_rank: int | None = None) -> None:
        self.fail_on_rank = fail_on_rank
        self.loads = 0
        self.full_state_dicts = 0

    def save(self, staging: Path, objects, rank: int, world_size: int) -> list[str]:
        skeleton, tensors = flatten_state({n: o.state_dict() for n, o in objects.items()})
        save_file({k: t.contiguous() for k, t in tensors.items()},
                  staging / f"rank{rank}.safetensors")
        (staging / f"rank{rank}.json").write_text(json.dumps(skeleton))
        if rank == self.fail_on_rank:
            raise OSError(f"disk full on rank {rank}")
        return [f"rank{rank}.safetensors", f"rank{rank}.json"]

    def load(self, path: Path, objects, rank: int, world_size: int) -> None:
        self.loads += 1
        tensors = load_file(path / f"rank{rank}.safetensors")
        state = unflatten_state(json.loads((path / f"rank{rank}.json").read_text()), tensors)
        for name, obj in objects.items():
            obj.load_state_dict(state[name])

    def full_state_dict(self, model: torch.nn.Module) -> dict:
        self.full_state_dicts += 1
        return model.state_dict()


class PickleWriter(SafetensorsWriter):
    """An engine-like writer whose ``.pt`` files need a full unpickler."""

    layout = "test-pickle"
    unpickles = "arbitrary"

    def save(self, staging: Path, objects, rank: int, world_size: int) -> list[str]:
        state = {n: o.state_dict() for n, o in objects.items()}
        torch.save({"state": state, "engine": argparse.Namespace(version="1.0")},
                   staging / f"rank{rank}.pt")
        return [f"rank{rank}.pt"]

    def load(self, path: Path, objects, rank: int, world_size: int) -> None:
        self.loads += 1
        saved = torch.load(path / f"rank{rank}.pt", weights_only=False)
        assert saved["engine"].version == "1.0"
        for name, obj in objects.items():
            obj.load_state_dict(saved["state"][name])
