"""``merge_deepspeed_weights``: a DeepSpeed ZeRO checkpoint to safetensors, in one process.

The fp32 weights are rebuilt from the ZeRO partitions by DeepSpeed's own ``zero_to_fp32``
logic, through its API (``deepspeed.utils.zero_to_fp32.get_fp32_state_dict_from_zero_checkpoint``);
DeepSpeed is imported lazily (``pip install "accel-checkpoint[deepspeed]"``). An accel
checkpoint (``manifest.json`` with layout ``"deepspeed"``, DeepSpeed's files under
``deepspeed/<model entry>/``) is verified byte for byte first; a bare DeepSpeed checkpoint
directory (``save_dir`` with ``latest`` / tag folders) has no hashes to check.

DeepSpeed reads its ``.pt`` files with a full unpickler, so this runs only when the caller
trusts the checkpoint (``trust_pickles=True`` / ``--trust_pickles``, or
``ACCEL_CHECKPOINT_TRUST_PICKLES=1``), as ``load_state`` does.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from accel_state import env
from accel_state.imports import require

from accel_checkpoint.constants import MANIFEST_NAME
from accel_checkpoint.containment import inside
from accel_checkpoint.errors import CheckpointError

__all__ = ["merge_deepspeed_weights", "is_deepspeed_checkpoint", "DEEPSPEED_LAYOUT"]

DEEPSPEED_LAYOUT = "deepspeed"
_DEEPSPEED_DIR = "deepspeed"


def _tags(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir()
                  if p.is_dir() and any(p.glob("*model_states.pt")))


def is_deepspeed_checkpoint(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is an accel DeepSpeed checkpoint or a bare DeepSpeed save_dir."""
    path = Path(path)
    if (path / MANIFEST_NAME).is_file():
        from accel_checkpoint.manifest import read_manifest

        return read_manifest(path).layout == DEEPSPEED_LAYOUT
    return path.is_dir() and (bool(_tags(path)) or any(path.glob("*model_states.pt")))


def _locate(path: Path, model_name: str | None) -> tuple[Path, str]:
    """``(save_dir, tag)`` of the model to merge, the accel checkpoint verified first."""
    if (path / MANIFEST_NAME).is_file():
        from accel_checkpoint.manifest import read_manifest, verify_checkpoint

        manifest = read_manifest(path)
        if manifest.layout != DEEPSPEED_LAYOUT:
            raise CheckpointError(f"{path} is a {manifest.layout!r} checkpoint, not a DeepSpeed "
                                  "one.")
        unlisted = sorted(str(p.relative_to(path)) for p in path.rglob("*")
                          if p.is_file() and p.relative_to(path).as_posix() not in manifest.files
                          and p.name != MANIFEST_NAME)
        if unlisted:
            raise CheckpointError(f"{path} holds files its manifest does not list "
                                  f"({', '.join(unlisted[:5])}); DeepSpeed would read them "
                                  "unverified: remove them.")
        verify_checkpoint(path, deep=True, fast=True, manifest=manifest)
        root = path / _DEEPSPEED_DIR
    elif any(path.glob("*model_states.pt")):  # a tag folder itself
        return path.parent, path.name
    else:
        root = path
    tags = _tags(root) if root.is_dir() else []
    if model_name is not None:
        if model_name not in tags:
            raise CheckpointError(f"{path} has no DeepSpeed checkpoint {model_name!r} (it has: "
                                  f"{', '.join(tags) or 'none'}).")
        return root, model_name
    latest = root / "latest"
    if latest.is_file() and len(tags) != 1:
        tag = latest.read_text().strip()
        inside(root, tag, latest)  # the tag is a folder inside save_dir, nothing else
        return root, tag
    if len(tags) != 1:
        raise CheckpointError(f"{path} holds {'no' if not tags else 'several'} DeepSpeed "
                              f"checkpoints ({', '.join(tags) or 'none'}): pass model_name= "
                              "(--model_name) to say which one to merge.")
    return root, tags[0]


def merge_deepspeed_weights(checkpoint_dir: str | os.PathLike[str],
                            output_path: str | os.PathLike[str], safe_serialization: bool = True,
                            remove_checkpoint_dir: bool = False, *, model_name: str | None = None,
                            max_shard_size: int | str = "10GB",
                            trust_pickles: bool | None = None) -> list[Path]:
    """Write the fp32 weights of a ZeRO (1/2/3) checkpoint to ``output_path/model.safetensors``
    (or shards + index); returns the files written. ``model_name``: the entry (tag) to merge
    when there are several. ``remove_checkpoint_dir`` deletes the checkpoint afterwards."""
    trusted = trust_pickles if trust_pickles is not None else \
        env.CHECKPOINT_TRUST_PICKLES.get_bool(False)
    source, target = Path(checkpoint_dir), Path(output_path)
    if not source.is_dir():
        raise CheckpointError(f"checkpoint_dir {source} does not exist or is not a directory.")
    if not trusted:
        raise CheckpointError(
            f"{source} is a DeepSpeed checkpoint: DeepSpeed reads its .pt files with a full "
            "unpickler, which can run code stored in them. Merge it only if you trust where "
            f"it comes from: pass trust_pickles=True (--trust_pickles) or set "
            f"{env.CHECKPOINT_TRUST_PICKLES.name}=1.")
    if remove_checkpoint_dir and source.resolve() in (target.resolve(), *target.resolve().parents):
        raise CheckpointError(f"output_path {target} is inside checkpoint_dir {source}, which "
                              "remove_checkpoint_dir=True would delete: write elsewhere.")
    root, tag = _locate(source, model_name)
    require("deepspeed", extra="deepspeed", dist="accel-checkpoint",
            feature="merging DeepSpeed ZeRO checkpoints")
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    from accel_checkpoint.weights import save_model_weights

    state: dict[str, Any] = get_fp32_state_dict_from_zero_checkpoint(str(root), tag=tag)
    # views into one flat fp32 buffer: give each its own storage (else they look tied)
    state = {k: v.clone() if hasattr(v, "clone") else v for k, v in state.items()}
    written = save_model_weights(state, target, max_shard_size=max_shard_size,
                                 safe_serialization=safe_serialization)
    if remove_checkpoint_dir:
        shutil.rmtree(source)
    return written
