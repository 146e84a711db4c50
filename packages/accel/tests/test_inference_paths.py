"""Accelerate's big-model paths (accel.big_modeling, accel.hooks, accel.inference,
accel.utils.modeling, accel.utils.offload) re-export accel-inference's own objects."""

from __future__ import annotations

import importlib

import pytest

PATHS = ["accel.big_modeling", "accel.hooks", "accel.inference", "accel.utils.modeling",
         "accel.utils.offload"]


@pytest.mark.parametrize("path", PATHS)
def test_paths_re_export_accel_inference_objects(path):
    import accel.utils
    import accel_inference

    from accel import _accelerate_helpers

    module = importlib.import_module(path)
    assert module.__all__
    for name in module.__all__:
        value = getattr(module, name)
        # the few helpers Accelerate's module defines that are no big-model code come
        # from the facade's own helpers (check_device_same, get_grad_scaler, ...)
        home = accel_inference if hasattr(accel_inference, name) else _accelerate_helpers
        assert value is getattr(home, name), f"{path}.{name}"
        if path.startswith("accel.utils."):  # like accelerate.utils: modeling and offload
            assert getattr(accel.utils, name) is value, f"accel.utils.{name}"


def test_top_level_names_and_one_home_for_load_checkpoint_in_model():
    import accel
    import accel.checkpointing
    import accel_checkpoint
    import accel_inference

    for name in ("init_empty_weights", "init_on_device", "cpu_offload", "cpu_offload_with_hook",
                 "disk_offload", "dispatch_model", "load_checkpoint_and_dispatch",
                 "infer_auto_device_map", "prepare_pippy", "load_checkpoint_in_model"):
        assert name in accel.__all__ and getattr(accel, name) is getattr(accel_inference, name)
    assert accel.checkpointing.load_checkpoint_in_model is accel_inference.load_checkpoint_in_model
    assert not hasattr(accel_checkpoint, "load_checkpoint_in_model")
    assert accel_checkpoint.load_model_weights.__module__ == "accel_checkpoint.weights"
