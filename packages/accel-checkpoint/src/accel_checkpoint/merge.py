"""``merge_fsdp_weights``: one process turns a sharded (DCP) checkpoint into safetensors.

No process group is needed: like torch's own ``format_utils.dcp_to_torch_save``, it calls
DCP's loader with ``no_dist=True`` and a planner that rebuilds the saved state dict from
the metadata (the public ``dcp.load`` only fills keys the caller already has), reading
every shard in this process. A
checkpoint written by :func:`~accel_checkpoint.sharded.save_sharded_state` is hash-checked
first (a damaged file is named); a bare DCP directory (Accelerate's
``pytorch_model_fsdp_0``) has no hashes to check, but is read the same safe way.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from accel_checkpoint.constants import MANIFEST_NAME
from accel_checkpoint.errors import CheckpointError

__all__ = ["merge_fsdp_weights", "load_full_state_dict"]


def _pick(names: list[str], kinds: dict[str, str], model_name: str | None, where: Path) -> str:
    if model_name is not None:
        if model_name not in names:
            raise CheckpointError(f"{where} has no entry {model_name!r} (it has: "
                                  f"{', '.join(names)}).")
        return model_name
    models = [n for n in names if kinds.get(n) == "model"] or names
    if len(models) != 1:
        raise CheckpointError(f"{where} holds several entries ({', '.join(models)}): pass "
                              "model_name= to say which one to merge.")
    return models[0]


def load_full_state_dict(checkpoint_dir: str | os.PathLike[str],
                         model_name: str | None = None) -> dict[str, Any]:
    """The full (unsharded) state dict of one model of a DCP checkpoint, in this process.

    With a manifest (accel's sharded checkpoints) every file's sha256 is checked first and
    the model is the entry saved as a module; in a bare DCP directory with a single
    top-level entry (Accelerate saves ``{"model": ...}``) that entry is unwrapped.
    """
    from torch.distributed.checkpoint.state_dict_loader import _load_state_dict

    from accel_checkpoint.dcp_io import (
        DCP_METADATA_NAME,
        SafeFullLoadPlanner,
        VerifiedReader,
        read_dcp_metadata,
    )

    path = Path(checkpoint_dir)
    if not path.is_dir():
        raise CheckpointError(f"checkpoint_dir {path} does not exist or is not a directory: "
                              "give the directory a sharded save wrote (it holds .metadata).")
    kinds: dict[str, str] = {}
    expected = None
    files = None
    if (path / MANIFEST_NAME).is_file():
        from accel_checkpoint.sharded import OBJECTS_KEY, read_sharded_manifest

        manifest = read_sharded_manifest(path)
        kinds = dict(manifest.metadata.get(OBJECTS_KEY, {}))
        expected = manifest.files.get(DCP_METADATA_NAME)
        files = manifest.files
    elif not (path / DCP_METADATA_NAME).is_file():
        raise CheckpointError(f"{path} is not a torch.distributed.checkpoint directory (no "
                              f"{DCP_METADATA_NAME} and no {MANIFEST_NAME}): merge_fsdp_weights "
                              "reads sharded checkpoints; a replicated one already holds "
                              "model.safetensors.")
    metadata = read_dcp_metadata(path / DCP_METADATA_NAME, expected)
    tops = sorted({str(fqn[0]) for fqn in metadata.planner_data.values()})
    unwrap = bool(kinds) or len(tops) == 1 or model_name is not None
    name = _pick(tops, kinds, model_name, path) if unwrap else None
    state: dict[str, Any] = {}
    planner = SafeFullLoadPlanner(keys={name} if name is not None else None)
    from torch.distributed.checkpoint.api import CheckpointException

    from accel_checkpoint.dcp_writer import raise_dcp_error

    reader = VerifiedReader(path, expected, files=files)  # files: each read is hash-checked
    try:
        _load_state_dict(state, storage_reader=reader, planner=planner, no_dist=True)
    except CheckpointException as exc:  # a BaseException: give it our type and a line
        raise_dcp_error(exc, path, "read")
    return state[name] if name is not None else state


def merge_fsdp_weights(checkpoint_dir: str | os.PathLike[str], output_path: str | os.PathLike[str],
                       safe_serialization: bool = True, remove_checkpoint_dir: bool = False, *,
                       model_name: str | None = None, max_shard_size: int | str = "10GB",
                       ) -> list[Path]:
    """Merge a sharded checkpoint into ``output_path/model.safetensors`` (or shards + index).

    Runs in one process, without a process group (the whole model must fit in CPU
    memory). ``safe_serialization=False`` writes ``pytorch_model.bin`` instead.
    ``remove_checkpoint_dir`` deletes the sharded checkpoint once the weights are written.
    Returns the files written.
    """
    from accel_checkpoint.weights import save_model_weights

    source, target = Path(checkpoint_dir), Path(output_path)
    if remove_checkpoint_dir and source.resolve() in (target.resolve(), *target.resolve().parents):
        raise CheckpointError(f"output_path {target} is inside checkpoint_dir {source}, which "
                              "remove_checkpoint_dir=True would delete: write elsewhere.")
    state = load_full_state_dict(source, model_name)
    nested = sorted(k for k, v in state.items() if isinstance(v, dict))
    if nested:
        raise CheckpointError(f"{source} holds nested entries {nested[:5]}, not a flat model "
                              "state dict: pass model_name= naming the model entry.")
    written = save_model_weights(state, target, max_shard_size=max_shard_size,
                                 safe_serialization=safe_serialization)
    if remove_checkpoint_dir:
        shutil.rmtree(source)
    return written
