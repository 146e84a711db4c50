"""The environment contract: every environment variable accel reads or the launcher sets.

This package is the only code of accel that reads ``os.environ`` (DESIGN.md §4). Each
variable is declared once as an :class:`EnvVar` with a docstring; the launcher writes them
by name and the runtime reads them through :meth:`EnvVar.get`. Our own names start with
``ACCEL_``; Accelerate's ``ACCELERATE_*`` spellings are honoured as aliases so scripts and
job files written for Accelerate keep working.

The declarations are split by reader to keep each file small: ``_runtime`` (process
topology and the launcher), ``_services`` (tracking, checkpoints, precision), ``_parallel``
(parallelism plugins), ``_deepspeed`` (the DeepSpeed plugin), ``_compile``
(torch.compile), ``_inference`` (big-model inference), ``_launch`` (the launcher's own). Use them as ``env.NAME``; the split is not part of the API.
"""

from __future__ import annotations

from accel_state.env import _compile, _core, _deepspeed, _inference, _parallel, _runtime, _services
from accel_state.env import _launch
from accel_state.env._compile import *  # noqa: F403
from accel_state.env._core import *  # noqa: F403
from accel_state.env._deepspeed import *  # noqa: F403
from accel_state.env._inference import *  # noqa: F403
from accel_state.env._launch import *  # noqa: F403
from accel_state.env._parallel import *  # noqa: F403
from accel_state.env._runtime import *  # noqa: F403
from accel_state.env._services import *  # noqa: F403

__all__ = [*_core.__all__, *_runtime.__all__, *_services.__all__, *_parallel.__all__,
           *_compile.__all__, *_inference.__all__, *_deepspeed.__all__,
           *_launch.__all__]
