#!/usr/bin/env python3
"""Keep modules small enough to read in one sitting (DESIGN.md §6).

A module over ``--warn`` lines (400) is reported as a warning: split it when you next touch
it. A module over ``--max`` lines (800) fails the check: split it before merging.
Only package sources count (``packages/*/src/**/*.py``); tests and tools are free.

Usage: ``python3 tools/check_module_size.py [--root REPO] [--warn 400] [--max 800]``.
Exit 0 when no module is over the limit, 1 otherwise.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def count_lines(path: Path) -> int:
    with path.open("rb") as fh:
        return sum(1 for _ in fh)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent,
                        help="repository root holding packages/*/src (default: this checkout)")
    parser.add_argument("--warn", type=int, default=400, help="warn above this many lines")
    parser.add_argument("--max", type=int, default=800, help="fail above this many lines")
    args = parser.parse_args(argv)
    if not (args.root / "packages").is_dir():
        print(f"check_module_size: {args.root}/packages is not a directory; pass --root REPO",
              file=sys.stderr)
        return 2
    modules = sorted(args.root.glob("packages/*/src/**/*.py"))
    failures = 0
    for path in modules:
        lines = count_lines(path)
        rel = path.relative_to(args.root)
        if lines > args.max:
            failures += 1
            print(f"{rel}: {lines} lines > {args.max} (hard limit): split this module")
        elif lines > args.warn:
            print(f"{rel}: {lines} lines > {args.warn} (warning): consider splitting it")
    if failures:
        print(f"check_module_size: {failures} module(s) over {args.max} lines", file=sys.stderr)
        return 1
    print(f"check_module_size: OK ({len(modules)} modules, none over {args.max} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
