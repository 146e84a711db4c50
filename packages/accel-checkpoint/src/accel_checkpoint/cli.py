"""``accel checkpoint verify PATH`` and ``accel checkpoint list DIR``.

Registered through the ``accel.cli`` entry-point group. Registering imports nothing heavy
(``accel --help`` stays instant); the handlers use :mod:`accel_checkpoint.manifest`.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from typing import Any

__all__ = ["register", "verify_command", "list_command"]


def verify_command(args: argparse.Namespace) -> int:
    """Exit 0 when the checkpoint is complete and intact, 1 (naming the bad file) if not."""
    from accel_checkpoint.manifest import verify_checkpoint

    try:
        manifest = verify_checkpoint(args.path, deep=not args.quick)
    except Exception as exc:  # the error classes import torch: told apart by name
        label = {"CorruptCheckpointError": "CORRUPT",
                 "CheckpointNotFoundError": "MISSING"}.get(type(exc).__name__)
        if label is None:
            raise
        print(f"{label} {exc}", file=sys.stderr)
        return 1
    total = sum(r.size for r in manifest.files.values())
    how = "sizes" if args.quick else "sizes and every digest"
    print(f"OK {args.path}: {len(manifest.files)} files ({total} bytes, {how} checked), "
          f"step {manifest.step}, world size {manifest.world_size}, ranks {manifest.ranks}")
    return 0


def list_command(args: argparse.Namespace) -> int:
    """One line per checkpoint under DIR, oldest first: status, step, time, size, path."""
    from accel_checkpoint.manifest import list_checkpoints

    infos = list_checkpoints(args.directory, deep=args.deep)
    if not infos:
        print(f"no checkpoints under {args.directory}")
        return 0
    for info in infos:
        m = info.manifest
        when = (datetime.datetime.fromtimestamp(m.created_unix).isoformat(timespec="seconds")
                if m else "-")
        size = sum(r.size for r in m.files.values()) if m else 0
        step = "-" if m is None or m.step is None else str(m.step)
        line = f"{info.status:8} step={step:>8} {when:19} {size:>14} B  {info.path}"
        print(line if info.ok else f"{line}  ({info.problem})")
    return 0 if all(i.ok for i in infos) else 1


def register(subparsers: Any) -> None:
    """Entry point of the ``accel.cli`` group: add ``accel checkpoint {verify,list}``."""
    parser = subparsers.add_parser(
        "checkpoint", help="Verify and list accel checkpoints.",
        description="Inspect accel checkpoints (directories with a manifest.json).")
    verbs = parser.add_subparsers(title="actions", dest="checkpoint_action", metavar="<action>")
    verify = verbs.add_parser("verify", help="Check every file of a checkpoint against its "
                              "manifest (size and digests); exit 1 naming the bad file.")
    verify.add_argument("path", help="checkpoint directory")
    verify.add_argument("--quick", action="store_true", help="check presence and sizes only")
    verify.set_defaults(func=verify_command)
    listing = verbs.add_parser("list", help="List the checkpoints under a directory, oldest "
                               "first, with their status (ok, partial, corrupt).")
    listing.add_argument("directory", help="directory holding checkpoints")
    listing.add_argument("--deep", action="store_true", help="also check every digest")
    listing.set_defaults(func=list_command)
    parser.set_defaults(func=lambda _args: parser.print_help() or 2)
