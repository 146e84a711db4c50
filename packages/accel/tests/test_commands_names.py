"""Accelerate's command-module names that accel now has (issue 24): each is the one object
of its micro-package (menu, estimate-memory steps, to-fsdp2 tables, launch's help groups),
and gather_tensor_shape / get_module_leaves at their utils paths."""

from __future__ import annotations

import pytest
import torch

from accel_launch import menu


def test_accelerates_module_paths_give_these_objects():
    from accel.commands import menu as compat
    from accel.commands.config.config_utils import BulletMenu
    from accel.commands.menu import cursor, helpers, input, keymap, selection_menu

    assert compat.BulletMenu is BulletMenu is selection_menu.BulletMenu is menu.BulletMenu
    assert input.register is menu.register and keymap.KEYMAP is menu.KEYMAP
    assert cursor.hide is menu.hide and helpers.Direction is menu.Direction


def test_estimate_to_fsdp2_and_launch_names_are_the_packages_own():
    import accel_inference.estimate_helpers as helpers
    import accel_launch.cli_compat as cli
    import accel_launch.to_fsdp2 as convert

    from accel.commands import estimate, launch, to_fsdp2

    for name in helpers.__all__:
        assert getattr(estimate, name) is getattr(helpers, name), name
    for name in ("ARGUMENT_KEY_MAPPING", "ARGUMENT_VALUE_MAPPING", "ConversionStatus",
                 "load_config"):
        assert getattr(to_fsdp2, name) is getattr(convert, name), name
    assert launch.options_to_group is cli.options_to_group


def test_gather_tensor_shape_on_one_process():
    from accel_state import PartialState
    from accel_state.errors import DistributedError

    from accel.utils.modeling import get_module_leaves
    from accel.utils.operations import TENSOR_TYPE_TO_INT, gather_tensor_shape

    PartialState(cpu=True)
    shape, code = gather_tensor_shape(torch.zeros(3, 0, 5, dtype=torch.int64))
    assert shape.tolist() == [3, 0, 5] and code == TENSOR_TYPE_TO_INT[torch.int64]
    with pytest.raises(DistributedError, match="None on every process"):
        gather_tensor_shape(None)
    assert get_module_leaves({"a": 1, "a.b": 1}) == ["a.b"]


def test_patch_optimizer_step_flags_that_the_step_ran():
    from accel.optimizer import patch_optimizer_step

    model = torch.nn.Linear(2, 1)
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    holder = type("Holder", (), {"_accelerate_step_called": False})()
    step = patch_optimizer_step(holder, sgd.step)
    model(torch.ones(1, 2)).sum().backward()
    before = model.weight.detach().clone()
    step()
    assert holder._accelerate_step_called is True
    assert not torch.equal(before, model.weight) and step.__name__ == "step"


def test_get_parameter_device():
    from accel_state.errors import ConfigurationError

    from accel.utils.bnb import get_parameter_device

    assert get_parameter_device(torch.nn.Linear(1, 1)) == torch.device("cpu")
    with pytest.raises(ConfigurationError, match="ReLU has no parameters"):
        get_parameter_device(torch.nn.ReLU())
