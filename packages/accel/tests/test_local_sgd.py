"""LocalSGD and join_uneven_inputs in one process (the 2-process behaviour is in
tests/integration/test_ddp_extras.py): no-ops, and their errors."""

from __future__ import annotations

import warnings

import pytest
import torch
from accel_state import ConfigurationError
from torch import nn

from accel import Accelerator, FullyShardedDataParallelPlugin
from accel.local_sgd import LocalSGD


def test_local_sgd_in_one_process_trains_untouched():
    accelerator = Accelerator(cpu=True)
    model = accelerator.prepare(nn.Linear(3, 1))
    before = model.weight.detach().clone()
    with LocalSGD(accelerator, model, local_sgd_steps=1) as local_sgd:
        assert not local_sgd.enabled
        model(torch.ones(2, 3)).sum().backward()
        local_sgd.step()
    assert local_sgd.num_steps == 1
    torch.testing.assert_close(model.weight, before)
    assert model.weight.grad is not None


@pytest.mark.parametrize("steps", [0, -1, 1.5, True])
def test_local_sgd_steps_must_be_a_positive_integer(steps):
    accelerator = Accelerator(cpu=True)
    with pytest.raises(ConfigurationError, match=rf"local_sgd_steps={steps!r}\) must be"):
        LocalSGD(accelerator, nn.Linear(1, 1), local_sgd_steps=steps)


def test_local_sgd_refuses_sharded_models(gloo_group):
    accelerator = Accelerator(cpu=True, fsdp_plugin=FullyShardedDataParallelPlugin())
    model = accelerator.prepare(nn.Linear(4, 4))
    with pytest.raises(ConfigurationError, match="'fsdp'.*shards them"):
        LocalSGD(accelerator, model, local_sgd_steps=2)
    assert not LocalSGD(accelerator, model, local_sgd_steps=2, enabled=False).enabled


def test_join_uneven_inputs_in_one_process_is_a_silent_no_op():
    accelerator = Accelerator(cpu=True)
    model = accelerator.prepare(nn.Linear(3, 1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with accelerator.join_uneven_inputs([model], even_batches=False):
            model(torch.ones(1, 3)).sum().backward()
