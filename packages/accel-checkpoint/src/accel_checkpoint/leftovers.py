"""What interrupted saves and rotations leave behind, and how the next save cleans it.

A save writes into ``<name>.tmp-<id>/``; replacing a checkpoint parks the old copy as
``<name>.old-<id>/`` for the swap; rotation renames a checkpoint to ``<name>.deleting-<id>/``
before deleting it, so a kill mid-delete never leaves a checkpoint half-deleted under its
own name. Every process working in such a folder holds a shared ``flock`` on it (the
writing rank from its creation; with per-rank layouts every rank while it writes its files
there), and the kernel drops the lock when the process dies, however it dies; so the next
save can tell a leftover (no holder: an exclusive lock is granted) from a folder a live
process still works in (held) without trusting ages or ids. After each commit the writing
rank runs :func:`clean_leftovers` on the checkpoint's parent folder (per-rank layouts: also
at the start of each load, once every rank has entered it; see
:func:`accel_checkpoint.rank_writers.clean_leftovers_together`):

- a staging folder nobody holds is removed (an interrupted save: never loaded anyway);
- a parked old copy nobody holds is removed when its checkpoint exists again, and put back
  under its name when it does not (the save was killed between its two renames);
- a rotation's folder nobody holds is removed (the rotation is finished).

Only folders named as accel names them (``<name><infix><12 hex digits>``) are considered:
a user's ``results.tmp-old`` is never touched. Each removal or restore is logged
(``accel_checkpoint`` logger, warning level). Folders younger than ``GRACE_S`` are left
alone: a save creates its folder and locks it a moment later. File systems without
``flock`` (some network mounts) are never cleaned: nothing is removed that cannot be
proven unheld.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from accel_checkpoint.constants import OLD_INFIX, TMP_INFIX, TRASH_INFIX

try:
    import fcntl
except ImportError:  # not POSIX (Windows): nothing is locked, nothing is cleaned
    fcntl = None  # type: ignore[assignment]

__all__ = ["claim", "release", "held", "trash", "clean_leftovers", "GRACE_S"]

#: Seconds a leftover must be untouched before it is cleaned.
GRACE_S = 10.0
_log = logging.getLogger("accel_checkpoint")
_HELD: dict[str, int] = {}
#: What accel names its working folders: ``<name><infix><12 hex digits>`` (a uuid4's start);
#: anything else is a user's, however it is named, and never touched.
_INFIXES = "|".join(re.escape(infix) for infix in (TMP_INFIX, OLD_INFIX, TRASH_INFIX))
_LEFTOVER = re.compile(rf".+(?:{_INFIXES})[0-9a-f]{{12}}")
_HELD_LOCK = threading.Lock()


def claim(folder: Path) -> None:
    """Hold ``folder`` (a staging, parked or rotation folder) until :func:`release`. The
    lock is shared: the ranks writing into one staging folder all hold it at once."""
    if fcntl is None:
        return
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:  # no flock here: nothing is cleaned on this file system either
        pass
    with _HELD_LOCK:
        _HELD[str(folder)] = fd


def release(folder: Path) -> None:
    """Let go of a folder :func:`claim` took (it was renamed into place or deleted)."""
    with _HELD_LOCK:
        fd = _HELD.pop(str(folder), None)
    if fd is not None:
        os.close(fd)


@contextmanager
def held(folder: Path) -> Iterator[None]:
    """:func:`claim` ``folder`` for the ``with`` block (a rank writing into a staging
    folder another rank made)."""
    claim(folder)
    try:
        yield
    finally:
        release(folder)


def trash(path: Path) -> None:
    """Delete the checkpoint ``path``: renamed to a rotation folder first, so a kill
    mid-delete leaves a leftover the next save removes, never a half-deleted checkpoint."""
    doomed = path.parent / f"{path.name}{TRASH_INFIX}{uuid.uuid4().hex[:12]}"
    os.replace(path, doomed)
    claim(doomed)
    try:
        shutil.rmtree(doomed)
    finally:
        release(doomed)


def _unheld(folder: Path) -> bool:
    """Whether no process holds ``folder`` and it has rested ``GRACE_S``."""
    if fcntl is None:
        return False
    try:
        if time.time() - folder.stat().st_mtime < GRACE_S:
            return False
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError:  # held by a live save or rotation (or no flock: prove nothing)
        return False
    finally:
        os.close(fd)  # also drops the lock just taken


def clean_leftovers(parent: Path) -> list[Path]:
    """Clean what interrupted saves and rotations left in ``parent`` (see the module's
    docstring); returns the folders removed or put back."""
    done: list[Path] = []
    try:
        children = sorted(p for p in parent.iterdir() if p.is_dir())
    except OSError:
        return done
    for child in children:
        name = child.name
        if not _LEFTOVER.fullmatch(name):
            continue
        if not _unheld(child):
            continue
        try:
            if OLD_INFIX in name and not (parent / name.split(OLD_INFIX)[0]).exists():
                final = parent / name.split(OLD_INFIX)[0]
                os.replace(child, final)
                _log.warning("accel-checkpoint: put back %s as %s (a save that replaced it "
                             "was interrupted between its two renames)", child, final)
            else:
                shutil.rmtree(child)
                what = ("the staging folder of an interrupted save" if TMP_INFIX in name
                        else "the parked copy of a replaced checkpoint" if OLD_INFIX in name
                        else "a checkpoint an interrupted rotation was deleting")
                _log.warning("accel-checkpoint: removed %s: %s", what, child)
        except OSError as exc:  # someone else cleaned it first, or it cannot be removed
            _log.warning("accel-checkpoint: could not clean %s (%s)", child, exc)
            continue
        done.append(child)
    return done
