"""accel-launch: the `accel` command line (`accel launch`, `accel env`, plug-in verbs).

Importing this package is cheap (no torch): the CLI modules import torch only inside the
handlers that need it.
"""

from __future__ import annotations

__version__ = "0.1.1"
