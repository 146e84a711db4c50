"""accel-launch: the `accel` command line (`accel launch`, `accel config`, `accel test`,
`accel env`, `accel to-fsdp2`, plug-in verbs) and the notebook/debug launchers.

Importing this package is cheap (no torch): the CLI modules import torch only inside the
handlers that need it.
"""

from __future__ import annotations

__version__ = "0.3.4"
