"""Accelerate's FSDP2 building blocks through the facade (``accel.utils``), one process:
a script that assembles FSDP2 by hand, as Accelerate's ``fsdp_utils`` allow, trains."""

from __future__ import annotations

import pytest
import torch
from accel import Accelerator
from accel.utils import FullyShardedDataParallelPlugin
from accel.utils.fsdp_utils import (
    fsdp2_apply_ac,
    fsdp2_canonicalize_names,
    fsdp2_prepare_model,
    fsdp2_switch_optimizer_parameters,
)
from accel_state import ConfigurationError


def test_hand_assembled_fsdp2_trains_with_the_optimizer_switched():
    import torch.distributed as dist
    from torch.distributed.tensor import DTensor

    try:
        accelerator = Accelerator(cpu=True, fsdp_plugin=FullyShardedDataParallelPlugin(
            auto_wrap_policy="SIZE_BASED_WRAP", min_num_params=10))
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 1))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        before = fsdp2_canonicalize_names(dict(model.named_parameters()))
        fsdp2_apply_ac(accelerator, model)
        model = fsdp2_prepare_model(accelerator, model)
        after = fsdp2_canonicalize_names(dict(model.named_parameters()))
        assert all(isinstance(p, DTensor) for p in after.values())
        fsdp2_switch_optimizer_parameters(
            optimizer, {p.data_ptr(): after[n] for n, p in before.items()},
            model_owned_parameter_ids=[id(p) for p in before.values()])
        start = after["0.weight"].full_tensor().clone()
        model(torch.ones(2, 4)).sum().backward()
        optimizer.step()
        assert not torch.equal(model[0].weight.full_tensor(), start)  # the shards trained
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def test_building_blocks_refuse_an_accelerator_without_fsdp():
    with pytest.raises(ConfigurationError, match="fsdp2_prepare_model needs an accelerator "
                       "running FSDP, but it runs SingleDeviceStrategy"):
        fsdp2_prepare_model(Accelerator(cpu=True), torch.nn.Linear(2, 2))
