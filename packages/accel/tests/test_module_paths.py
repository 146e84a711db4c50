"""Accelerate's module paths re-export the very objects of the micro-packages."""

from __future__ import annotations

import importlib

import pytest


@pytest.mark.parametrize("module", ["accel.utils.dataclasses", "accel.utils.operations",
                                    "accel.utils.random", "accel.utils.environment",
                                    "accel.utils.imports"])
def test_every_submodule_name_is_also_in_accel_utils(module):
    import accel.utils

    sub = importlib.import_module(module)
    missing = [name for name in sub.__all__ if getattr(accel.utils, name, None) is not getattr(sub, name)]
    assert missing == []


def test_configuration_classes_are_the_packages_own():
    import accel_checkpoint.project
    import accel_data
    import accel_state

    from accel.utils.dataclasses import (
        DataLoaderConfiguration,
        GradientAccumulationPlugin,
        ProjectConfiguration,
    )

    assert DataLoaderConfiguration is accel_data.DataLoaderConfiguration
    assert ProjectConfiguration is accel_checkpoint.project.ProjectConfiguration
    assert GradientAccumulationPlugin is accel_state.GradientAccumulationPlugin
