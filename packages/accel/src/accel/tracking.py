"""Accelerate's ``accelerate.tracking`` module path: re-exports only.

The trackers and their registry are accel-tracking's; the Accelerator's tracking methods
(:class:`TrackingMixin`) live in ``accel._tracking``.
"""

from __future__ import annotations

from accel_tracking import (
    TRACKERS,
    AimTracker,
    ClearMLTracker,
    CometMLTracker,
    DVCLiveTracker,
    GeneralTracker,
    LoggerType,
    MLflowTracker,
    SwanLabTracker,
    TensorBoardTracker,
    TrackerFailureWarning,
    TrackerGroup,
    TrackioTracker,
    WandBTracker,
    filter_trackers,
    get_available_trackers,
    on_main_process,
    register_tracker_class,
)

from accel._tracking import LOGGER_TYPE_TO_CLASS, TrackingMixin
from accel._module_compat import forward_to

__all__ = [
    "TrackingMixin", "GeneralTracker", "on_main_process", "filter_trackers",
    "get_available_trackers", "register_tracker_class", "LoggerType", "TRACKERS", "LOGGER_TYPE_TO_CLASS",
    "TensorBoardTracker", "WandBTracker", "MLflowTracker", "CometMLTracker", "AimTracker",
    "ClearMLTracker", "DVCLiveTracker", "SwanLabTracker", "TrackioTracker",
    "TrackerFailureWarning", "TrackerGroup",
]


# Accelerate's incidental names (helpers its module happened to import), on first use
__getattr__ = forward_to(__name__, "accel.utils", "accel.logging")
