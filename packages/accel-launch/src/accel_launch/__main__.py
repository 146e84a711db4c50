"""`python -m accel_launch` runs the `accel` command line."""

from __future__ import annotations

from accel_launch.cli import main

raise SystemExit(main())
