"""accel-tracking: experiment trackers (wandb, TensorBoard, MLflow, ...) pluggable by name.

Importing this package imports no tracker SDK: the built-in trackers register through
the ``accel.trackers`` entry-point group and import their SDK only when a run starts.
"""

from __future__ import annotations

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

__version__ = "0.1.3"

__all__ = [
    "GeneralTracker", "on_main_process", "TrackerGroup", "TrackerFailureWarning",
    "build_trackers", "tqdm", "TRACKERS", "LoggerType", "filter_trackers",
    "get_available_trackers", "register_tracker_class", "TensorBoardTracker", "WandBTracker",
    "MLflowTracker", "CometMLTracker", "AimTracker", "ClearMLTracker", "DVCLiveTracker",
    "SwanLabTracker", "TrackioTracker", "__version__",
]
