"""accel-tracking: experiment trackers (wandb, TensorBoard, MLflow, ...) pluggable by name.

Importing this package imports no tracker SDK: the built-in trackers register through
the ``accel.trackers`` entry-point group and import their SDK only when a run starts.

Every name loads on first use (PEP 562): ``import accel`` loads the registry and the tracker
group, not the built-in trackers' modules, which load when a run names them. Type checkers
see the real imports below.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.4"

# module -> the public names it defines
_MODULES = {
    "accel_tracking.base": ("GeneralTracker", "on_main_process"),
    "accel_tracking.group": ("TrackerFailureWarning", "TrackerGroup", "build_trackers"),
    "accel_tracking.progress": ("tqdm",),
    "accel_tracking.registry": (
        "TRACKERS", "LoggerType", "filter_trackers", "get_available_trackers",
        "register_tracker_class",
    ),
    "accel_tracking.trackers.dvclive": ("DVCLiveTracker",),
    "accel_tracking.trackers.mlflow": ("MLflowTracker",),
    "accel_tracking.trackers.services": (
        "AimTracker", "ClearMLTracker", "CometMLTracker", "SwanLabTracker", "TrackioTracker",
    ),
    "accel_tracking.trackers.tensorboard": ("TensorBoardTracker",),
    "accel_tracking.trackers.wandb": ("WandBTracker",),
}
_EXPORTS = {name: module for module, names in _MODULES.items() for name in names}

__all__ = [
    "GeneralTracker", "on_main_process", "TrackerGroup", "TrackerFailureWarning",
    "build_trackers", "tqdm", "TRACKERS", "LoggerType", "filter_trackers",
    "get_available_trackers", "register_tracker_class", "TensorBoardTracker", "WandBTracker",
    "MLflowTracker", "CometMLTracker", "AimTracker", "ClearMLTracker", "DVCLiveTracker",
    "SwanLabTracker", "TrackioTracker", "__version__",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'accel_tracking' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # cache: the next lookup is a plain module attribute
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


if TYPE_CHECKING:
    from accel_tracking.base import GeneralTracker, on_main_process
    from accel_tracking.group import TrackerFailureWarning, TrackerGroup, build_trackers
    from accel_tracking.progress import tqdm
    from accel_tracking.registry import (
        TRACKERS,
        LoggerType,
        filter_trackers,
        get_available_trackers,
        register_tracker_class,
    )
    from accel_tracking.trackers.dvclive import DVCLiveTracker
    from accel_tracking.trackers.mlflow import MLflowTracker
    from accel_tracking.trackers.services import (
        AimTracker,
        ClearMLTracker,
        CometMLTracker,
        SwanLabTracker,
        TrackioTracker,
    )
    from accel_tracking.trackers.tensorboard import TensorBoardTracker
    from accel_tracking.trackers.wandb import WandBTracker
