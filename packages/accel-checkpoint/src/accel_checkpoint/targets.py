"""A save never deletes or renames what it did not write.

A save replaces its target folder as a whole (staging folder, then one atomic rename), so
before it starts, and again just before the rename, the target must be absent, an empty
folder, or an accel checkpoint holding only the files its manifest lists. Anything else —
a regular file, a symbolic link, a folder of someone's notes, an Accelerate checkpoint, an
accel checkpoint with a file added by hand — is refused with a
:class:`~accel_checkpoint.errors.CheckpointExistsError` that lists what is there and says
what to do; nothing is written or removed. A target that cannot be created is a
:class:`~accel_checkpoint.errors.CheckpointWriteError` naming the target (not the internal
staging folder). Rotation (``total_limit``) skips checkpoints holding foreign files too.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path, PurePosixPath

from accel_checkpoint.constants import FORMAT_NAME, MANIFEST_NAME, TMP_INFIX
from accel_checkpoint.leftovers import claim
from accel_checkpoint.errors import CheckpointExistsError, CheckpointWriteError

__all__ = ["foreign_entries", "check_save_target", "new_staging_dir"]

_SHOWN = 8


def _show(names: list[str]) -> str:
    more = f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else ""
    return ", ".join(names[:_SHOWN]) + more


def foreign_entries(folder: Path) -> list[str] | None:
    """What the accel checkpoint ``folder`` holds that its manifest does not list (folders
    end in ``/``); ``None`` when ``folder`` is no accel checkpoint (no readable manifest).
    The manifest's own digest is not checked: a damaged checkpoint is still ours."""
    try:
        raw = json.loads((folder / MANIFEST_NAME).read_bytes())
    except (OSError, ValueError):
        return None
    if (not isinstance(raw, dict) or raw.get("format") != FORMAT_NAME
            or not isinstance(raw.get("files"), dict)):
        return None
    listed = {str(name) for name in raw["files"]} | {MANIFEST_NAME}
    parents = {p.as_posix() for name in listed for p in PurePosixPath(name).parents}
    foreign: list[str] = []
    for dirpath, dirnames, filenames in os.walk(folder):
        here = Path(dirpath).relative_to(folder)
        for name in sorted(dirnames):
            rel = (here / name).as_posix()
            if rel not in parents:
                foreign.append(f"{rel}/")
                dirnames.remove(name)
        foreign += [(here / n).as_posix() for n in sorted(filenames)
                    if (here / n).as_posix() not in listed]
    return sorted(foreign)


def check_save_target(final: Path) -> None:
    """Refuse a save to ``final`` that would delete or rename something it did not write."""
    if final.is_symlink():
        raise CheckpointExistsError(final, (
            f"Cannot save a checkpoint to {final}: it is a symbolic link (to "
            f"{os.readlink(final)}), which the save would replace. Save to the folder it "
            "points to, or to another path."))
    if not final.exists():
        return
    if not final.is_dir():
        raise CheckpointExistsError(final, (
            f"Cannot save a checkpoint to {final}: a file of that name exists, and a save "
            "never removes or renames what it did not write. Save to another path, or move "
            "the file away first."))
    entries = sorted(p.name + ("/" if p.is_dir() else "") for p in final.iterdir())
    if not entries:
        return
    foreign = foreign_entries(final)
    if foreign is None:
        raise CheckpointExistsError(final, (
            f"Cannot save a checkpoint to {final}: the folder exists and is not an accel "
            f"checkpoint (it holds {_show(entries)}). A save replaces its folder as a whole, "
            "so it would delete them. Save to another (new or empty) folder, or remove "
            "them first."))
    if foreign:
        raise CheckpointExistsError(final, (
            f"Cannot overwrite the checkpoint {final}: it also holds what its manifest does "
            f"not list ({_show(foreign)}), which the overwrite would delete. Move them out "
            "of the folder, or save to another path."))


def new_staging_dir(final: Path) -> Path:
    """Create ``<final>.tmp-<id>/`` beside ``final``; an OS error names ``final``."""
    staging = final.parent / f"{final.name}{TMP_INFIX}{uuid.uuid4().hex[:12]}"
    try:
        staging.mkdir(parents=True)
        claim(staging)  # held until committed or aborted: no later save cleans it meanwhile
    except OSError as exc:
        why = exc.strerror or type(exc).__name__
        raise CheckpointWriteError(final, (
            f"Cannot save a checkpoint to {final}: its folder {final.parent} cannot be "
            f"written ({why}). Make {final.parent} writable, or save to another path."),
            exc.errno) from None
    return staging
