#!/usr/bin/env python3
"""Keep modules small enough to read in one sitting (DESIGN.md §6).

A module over ``--max`` lines (400) fails the check: split it along a real seam (what one
part does that the other does not need) before merging, and re-export from the old module
what other packages import from it. Only package sources count
(``packages/*/src/**/*.py``); tests and tools are free.

Usage: ``python3 tools/check_module_size.py [--root REPO] [--max 400]``.
Exit 0 when no module is over the limit, 1 otherwise.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

#: Lines a package module may have (issue 40.7: it was a warning at 400, an error at 800).
LIMIT = 400


def count_lines(path: Path) -> int:
    with path.open("rb") as fh:
        return sum(1 for _ in fh)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent,
                        help="repository root holding packages/*/src (default: this checkout)")
    parser.add_argument("--max", type=int, default=LIMIT,
                        help=f"fail above this many lines (default {LIMIT})")
    args = parser.parse_args(argv)
    if not (args.root / "packages").is_dir():
        print(f"check_module_size: {args.root}/packages is not a directory; pass --root REPO",
              file=sys.stderr)
        return 2
    modules = sorted(args.root.glob("packages/*/src/**/*.py"))
    failures = 0
    for path in modules:
        lines = count_lines(path)
        if lines > args.max:
            failures += 1
            print(f"{path.relative_to(args.root)}: {lines} lines > {args.max}: split this "
                  "module along a seam")
    if failures:
        print(f"check_module_size: {failures} module(s) over {args.max} lines", file=sys.stderr)
        return 1
    print(f"check_module_size: OK ({len(modules)} modules, none over {args.max} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
