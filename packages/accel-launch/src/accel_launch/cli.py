"""`accel`: the command-line entry point.

Verbs are not hard-wired: each one is a ``register(subparsers)`` function published in the
``accel.cli`` entry-point group, the built-in ``launch`` and ``env`` exactly like the
``checkpoint``/``config``/``merge-weights`` verbs other packages add. A verb that fails to
load is reported as a warning so one broken plug-in never takes the whole CLI down.

Nothing here imports torch: ``accel --help`` must stay instant. Verbs import their heavy
dependencies inside their handlers.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable, Sequence
from importlib import metadata
from typing import Any

from accel_launch.parser import AccelArgumentParser

__all__ = ["ENTRY_POINT_GROUP", "build_parser", "main", "verb_entry_points"]

ENTRY_POINT_GROUP = "accel.cli"


def verb_entry_points() -> list[metadata.EntryPoint]:
    """Entry points of the ``accel.cli`` group, one per name, sorted by name."""
    seen: dict[str, metadata.EntryPoint] = {}
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP):
        first = seen.get(ep.name)
        if first is None:
            seen[ep.name] = ep
        elif first.value != ep.value:
            _warn(f"two packages define the verb {ep.name!r} ({first.value} and {ep.value}); "
                  f"using {first.value}. Uninstall one of them to silence this.")
    return [seen[name] for name in sorted(seen)]


def _warn(message: str) -> None:
    print(f"accel: warning: {message}", file=sys.stderr)


def build_parser(entry_points: Iterable[metadata.EntryPoint] | None = None,
                 ) -> AccelArgumentParser:
    """The top-level parser with one sub-command per loadable ``accel.cli`` entry point."""
    parser = AccelArgumentParser(
        prog="accel",
        description="accel command line: launch training scripts, inspect the environment, ...",
    )
    subparsers = parser.add_subparsers(title="commands", dest="command", metavar="<command>")
    eps = verb_entry_points() if entry_points is None else list(entry_points)
    for ep in eps:
        try:
            register = ep.load()
            register(subparsers)
        except Exception as exc:  # a broken plug-in must not break the other verbs
            _warn(f"could not load the command {ep.name!r} ({ep.value}): "
                  f"{type(exc).__name__}: {exc}. Reinstall the package that provides it.")
    return parser


def _run_handler(func: Callable[[argparse.Namespace], Any], args: argparse.Namespace) -> int:
    """Run a verb; accel's own errors become one line on stderr instead of a traceback."""
    try:
        result = func(args)
    except Exception as exc:
        errors = sys.modules.get("accel_state.errors")
        if errors is None or not isinstance(exc, errors.AccelError):
            raise
        if getattr(args, "debug", False):
            raise
        prog = f"accel {args.command}" if getattr(args, "command", None) else "accel"
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 2 if isinstance(exc, errors.ConfigurationError) else 1
    return int(result or 0)


def main(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` (default ``sys.argv[1:]``), run the chosen verb, return its exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    eps = verb_entry_points()
    # Only the chosen verb's plug-in is loaded (others may import heavy modules); the full
    # list is built for `accel --help` and for an unknown verb's error message.
    chosen = [ep for ep in eps if argv and ep.name == argv[0]]
    parser = build_parser(chosen or eps)
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return 2
    return _run_handler(func, args)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
