"""A checkpoint only ever reads files inside its own folder.

Every index a reader follows — ``manifest.json``'s file list and objects, a sharded
safetensors index's ``weight_map``, DCP's ``.metadata`` storage paths, DeepSpeed's
``latest`` tag, the files of an Accelerate folder — names files by relative path.
:func:`inside` is the one check they all go through: a name must be a plain relative
path (no absolute path, drive, ``..`` part, backslash or NUL), and, unless the reader
allows it, the file it reaches must still lie inside the folder once symbolic links are
followed. Anything else is refused with :class:`~accel_checkpoint.errors.CorruptCheckpointError`
naming the index that listed it. Standard library only (the ``accel checkpoint`` verbs
use it without torch).
"""

from __future__ import annotations

import os
import re
from pathlib import Path, PurePosixPath

__all__ = ["name_problem", "inside", "check_names"]

_DRIVE = re.compile(r"^[A-Za-z]:")


def _refuse(where: object, problem: str) -> Exception:
    from accel_checkpoint.errors import CorruptCheckpointError  # imports accel_state (torch)

    return CorruptCheckpointError(where, problem)


def name_problem(name: object) -> str | None:
    """Why ``name`` is not a plain relative path inside a folder (``None`` when it is)."""
    if not isinstance(name, str) or not name:
        return f"{name!r} is not a file name"
    if "\0" in name or "\\" in name:
        return f"{name!r} holds a NUL or a backslash, which a checkpoint file name never does"
    if name.startswith("/") or _DRIVE.match(name):
        return f"{name!r} is an absolute path"
    parts = PurePosixPath(name).parts
    if ".." in parts:
        return f"{name!r} climbs out of the folder ('..')"
    if not parts or parts == (".",):
        return f"{name!r} names the folder itself, not a file in it"
    return None


def inside(root: str | os.PathLike[str], name: object, index: object,
           follow_links: bool = False) -> Path:
    """``root / name``, refused unless it is a file path inside the folder ``root``.

    ``index``: the file (or folder) whose listing named it, for the error message.
    ``follow_links=False`` (every accel checkpoint, Accelerate folder and DCP directory):
    the path must still be inside ``root`` after resolving symbolic links (a link that
    stays inside is fine). ``follow_links=True`` checks the name only: for plain weight
    folders, whose files are symbolic links into a shared store in the Hugging Face hub
    cache (``snapshots/<rev>/model.safetensors -> ../../blobs/<hash>``).
    """
    problem = name_problem(name)
    root = Path(root)
    if problem is not None:
        raise _refuse(index, f"names {problem}: a checkpoint only reads files inside its own "
                      f"folder ({root}). The index was damaged or crafted; do not load it.")
    path = root / str(name)
    if not follow_links:
        real_root, real = root.resolve(), path.resolve()
        if real != real_root and real_root not in real.parents:
            raise _refuse(path, f"leads out of the checkpoint folder {root} (it resolves to "
                          f"{real}, through a symbolic link): a checkpoint only reads files "
                          "inside its own folder. Replace the link by the file itself.")
    return path


def check_names(names: object, index: object) -> None:
    """Refuse the first of ``names`` that is not a plain relative path (names only: no
    file system access), naming ``index`` (the listing they come from)."""
    for name in names:  # type: ignore[attr-defined]
        problem = name_problem(name)
        if problem is not None:
            raise _refuse(index, f"names {problem}: a checkpoint only reads files inside its "
                          "own folder. The index was damaged or crafted; do not load it.")
