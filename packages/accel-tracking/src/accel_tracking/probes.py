"""Accelerate's tracker availability probes (``accelerate.utils.is_wandb_available``, ...).

Each reads package metadata and imports nothing, so calling one is cheap. wandb,
TensorBoard and MLflow's probes live in accel_state.imports and are re-exported as they are.
"""

from __future__ import annotations

from accel_state.imports import (
    is_mlflow_available,
    is_package_available,
    is_tensorboard_available,
    is_wandb_available,
)

__all__ = ["is_wandb_available", "is_tensorboard_available", "is_mlflow_available",
           "is_comet_ml_available", "is_aim_available", "is_clearml_available",
           "is_dvclive_available", "is_swanlab_available", "is_trackio_available"]


def is_comet_ml_available() -> bool:
    return is_package_available("comet_ml")


def is_aim_available() -> bool:
    return is_package_available("aim")


def is_clearml_available() -> bool:
    return is_package_available("clearml")


def is_dvclive_available() -> bool:
    return is_package_available("dvclive")


def is_swanlab_available() -> bool:
    return is_package_available("swanlab")


def is_trackio_available() -> bool:
    return is_package_available("trackio")
