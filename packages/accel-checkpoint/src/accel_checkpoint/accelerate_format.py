"""Checkpoints written by Hugging Face Accelerate's ``save_state``, read safely.

A project switching from Accelerate mid-training points ``load_state`` at the folder its
last run wrote. That folder has no manifest; its files are Accelerate's:
``model.safetensors`` / ``pytorch_model.bin`` (``_<i>`` for the i-th model),
``optimizer.bin``, ``scheduler.bin``, ``scaler.pt``, ``custom_checkpoint_<i>.pkl`` (torch
files of state dicts) and ``random_states_<rank>.pkl`` (RNG states, which hold numpy
arrays). Every torch file is read with ``torch.load(weights_only=True)``; numpy's RNG state
is allowed by naming exactly the numpy classes it needs — never a full unpickler, so a
hostile file is refused rather than run. Without a manifest there is nothing to verify the
bytes against: the reader says so, and a damaged file is reported by its format check.

A folder counts as Accelerate's by what Accelerate writes (:mod:`accel_checkpoint.recognise`):
one holding accel's own files, a save's staging folder or a parked copy never does. Every
file read must lie inside the folder (:func:`accel_checkpoint.containment.inside`: a
symbolic link out of it is refused).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from accel_checkpoint.containment import inside
from accel_checkpoint.recognise import accel_files, accelerate_files, is_save_leftover

__all__ = ["AccelerateCheckpoint", "is_accelerate_checkpoint", "read_accelerate_checkpoint",
           "restore_accelerate_rng"]

_MODEL = re.compile(r"(?:model|pytorch_model)(?:_(\d+))?\.(safetensors|bin)")
_NUMBERED = {"optimizer": re.compile(r"optimizer(?:_(\d+))?\.bin"),
             "scheduler": re.compile(r"scheduler(?:_(\d+))?\.bin"),
             "custom": re.compile(r"custom_checkpoint_(\d+)\.pkl")}
_RNG = "random_states_{}.pkl"


@dataclass
class AccelerateCheckpoint:
    """The state dicts of one Accelerate checkpoint, by kind and index, for one rank."""

    path: Path
    models: list[dict[str, torch.Tensor]] = field(default_factory=list)
    optimizers: list[dict[str, Any]] = field(default_factory=list)
    schedulers: list[dict[str, Any]] = field(default_factory=list)
    custom: list[dict[str, Any]] = field(default_factory=list)
    scaler: dict[str, Any] | None = None
    #: this rank's RNG states (``random_state``, ``numpy_random_seed``, ``torch_manual_seed``,
    #: ``torch_cuda_manual_seed``, ``step``), None when the checkpoint has none for it
    rng: dict[str, Any] | None = None
    #: Accelerate's ``Accelerator.step`` at the save
    step: int = 0


def is_accelerate_checkpoint(path: str | Path) -> bool:
    """Whether ``path`` is a folder written by Accelerate's ``save_state``: it holds files
    only Accelerate writes (``optimizer.bin``, ``random_states_0.pkl``, ...) and none of
    accel's own (nor a manifest), and is no save's staging folder nor a parked copy."""
    path = Path(path)
    if not path.is_dir() or is_save_leftover(path) or accel_files(path):
        return False
    return bool(accelerate_files(path))


def _indexed(path: Path, pattern: re.Pattern[str]) -> list[Path]:
    """The files matching ``pattern`` in index order (no number = 0); a gap is an error."""
    found: dict[int, Path] = {}
    for child in path.iterdir():
        match = pattern.fullmatch(child.name)
        if match:
            found[int(match.group(1) or 0)] = child
    if sorted(found) != list(range(len(found))):
        raise ValueError(f"{path}: the numbered files {sorted(p.name for p in found.values())} "
                         "have a gap; the checkpoint is incomplete.")
    return [found[i] for i in range(len(found))]


@contextlib.contextmanager
def _numpy_allowed() -> Iterator[None]:
    """Let ``weights_only`` loading build numpy arrays and dtypes (numpy's RNG state), and
    nothing else of numpy."""
    import numpy as np

    core = getattr(np, "_core", None) or np.core
    allowed = [np.ndarray, np.dtype, core.multiarray._reconstruct,
               type(np.dtype(np.uint32)), type(np.dtype(np.float64))]
    safe_globals = getattr(torch.serialization, "safe_globals", None)
    if safe_globals is not None:
        with safe_globals(allowed):
            yield
    else:  # torch 2.4: only the process-wide allow-list exists
        torch.serialization.add_safe_globals(allowed)
        yield


def _load(file: Path) -> Any:
    from accel_checkpoint.errors import CorruptCheckpointError

    inside(file.parent, file.name, file.parent)
    try:
        return torch.load(file, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise CorruptCheckpointError(
            file, f"not readable as an Accelerate checkpoint file with "
            f"torch.load(weights_only=True) ({type(exc).__name__}: {exc}); accel never "
            "unpickles arbitrary objects") from None


def _model(file: Path) -> dict[str, torch.Tensor]:
    if file.suffix == ".safetensors":
        inside(file.parent, file.name, file.parent)
        from safetensors.torch import load_file

        return load_file(file)
    return _load(file)


def read_accelerate_checkpoint(path: str | Path, rank: int = 0) -> AccelerateCheckpoint:
    """Every state of the Accelerate checkpoint at ``path`` for ``rank`` (nothing applied)."""
    path = Path(path)
    models: dict[int, Path] = {}
    for child in path.iterdir():
        match = _MODEL.fullmatch(child.name)
        if match:
            index = int(match.group(1) or 0)
            # safetensors wins when both were written
            if index not in models or child.suffix == ".safetensors":
                models[index] = child
    checkpoint = AccelerateCheckpoint(
        path=path, models=[_model(models[i]) for i in sorted(models)],
        optimizers=[_load(f) for f in _indexed(path, _NUMBERED["optimizer"])],
        schedulers=[_load(f) for f in _indexed(path, _NUMBERED["scheduler"])],
        custom=[_load(f) for f in _indexed(path, _NUMBERED["custom"])])
    if (path / "scaler.pt").exists():
        checkpoint.scaler = _load(path / "scaler.pt")
    rng_file = path / _RNG.format(rank)
    if rng_file.exists():
        with _numpy_allowed():
            checkpoint.rng = _load(rng_file)
        checkpoint.step = int(checkpoint.rng.get("step", 0))
    return checkpoint


def restore_accelerate_rng(states: dict[str, Any]) -> None:
    """Set Python's, numpy's and torch's (CPU, and CUDA when saved and present) generators
    to the states Accelerate saved for this rank."""
    import random

    import numpy as np

    if "random_state" in states:
        version, internal, gauss = states["random_state"]
        random.setstate((version, tuple(internal), gauss))
    if "numpy_random_seed" in states:
        np.random.set_state(states["numpy_random_seed"])
    if "torch_manual_seed" in states:
        torch.set_rng_state(states["torch_manual_seed"])
    cuda = states.get("torch_cuda_manual_seed")
    if cuda is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda)
