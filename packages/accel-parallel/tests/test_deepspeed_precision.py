"""What a bf16/fp16 DeepSpeed engine runs in, told truthfully, and the user's float batches
reaching it: ``mixed_precision`` / ``native_amp`` / ``forward_context`` of the strategy, and
the input cast registered on each engine (floating tensors only, nested structures too).
No processes; no DeepSpeed needed (the engine is stood in for by a module)."""

from __future__ import annotations

from collections import namedtuple

import pytest
import torch
from accel_parallel import DeepSpeedPlugin, DeepSpeedStrategy, Strategy
from accel_parallel.deepspeed.precision import cast_floating_inputs
from accel_precision import build_precision


def _strategy(state, config, precision="no"):
    plugin = DeepSpeedPlugin(hf_ds_config=config)
    return DeepSpeedStrategy(state, precision=build_precision(precision, state.device),
                             plugins={"default": plugin})


@pytest.mark.parametrize(("config", "precision", "expected"), [
    ({"bf16": {"enabled": True}}, "no", "bf16"),  # a JSON that enables bf16 by itself
    ({"bf16": {"enabled": "auto"}}, "bf16", "bf16"),
    ({}, "bf16", "bf16"),
    ({}, "no", "no"),
    ({"bf16": {"enabled": "auto"}}, "no", "no"),
])
def test_mixed_precision_is_what_the_engine_runs(state, config, precision, expected):
    strategy = _strategy(state, config, precision)
    assert strategy.mixed_precision == expected
    assert strategy.native_amp is False  # the engine holds 16-bit weights: no autocast
    with strategy.forward_context():
        assert not torch.is_autocast_enabled("cpu")


def test_other_strategies_report_their_precision(state):
    strategy = Strategy(state, precision=build_precision("bf16", state.device))
    assert strategy.mixed_precision == "bf16" and strategy.native_amp is True
    with strategy.forward_context():
        assert torch.is_autocast_enabled("cpu")


class _Probe(torch.nn.Module):
    """Records the dtypes its forward receives."""

    def forward(self, *args, **kwargs):
        self.seen = (args, kwargs)
        return torch.zeros(())


Pair = namedtuple("Pair", "features ids")


def test_floating_inputs_are_cast_to_the_engines_dtype_and_others_left_alone():
    probe = _Probe()
    cast_floating_inputs(probe, {"bf16": {"enabled": True}})
    ids = torch.tensor([1, 2])
    probe(torch.randn(2, 3), Pair(torch.randn(2), ids), [torch.randn(1).double(), "text"],
          mask=torch.ones(2, dtype=torch.bool), extra={"x": torch.randn(2), "n": 3})
    args, kwargs = probe.seen
    assert args[0].dtype == torch.bfloat16
    assert isinstance(args[1], Pair) and args[1].features.dtype == torch.bfloat16
    assert args[1].ids is ids  # integer tensors (token ids, labels) pass untouched
    assert args[2][0].dtype == torch.bfloat16 and args[2][1] == "text"
    assert kwargs["mask"].dtype == torch.bool
    assert kwargs["extra"]["x"].dtype == torch.bfloat16 and kwargs["extra"]["n"] == 3


def test_fp16_engines_get_half_inputs_and_fp32_engines_nothing():
    half = _Probe()
    cast_floating_inputs(half, {"fp16": {"enabled": True}})
    half(torch.randn(2))
    assert half.seen[0][0].dtype == torch.float16
    for config in ({}, {"bf16": {"enabled": False}},
                   {"bf16": {"enabled": True}, "torch_autocast": {"enabled": True}}):
        plain = _Probe()
        cast_floating_inputs(plain, config)
        assert not plain._forward_pre_hooks, config
