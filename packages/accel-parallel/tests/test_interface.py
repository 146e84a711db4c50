"""The Strategy interface: grouped prepare, precision handed over, the step hooks,
re-binding optimizers, topology defaults and selection by data."""

from __future__ import annotations

import pytest
import torch
from accel_parallel import (
    STRATEGIES,
    DDPStrategy,
    PrepareRequest,
    SingleDeviceStrategy,
    BOUNDARY,
    Strategy,
    StrategyConfig,
    rebind_optimizer,
    select_strategy,
)
from accel_precision import BF16Precision, NoPrecision
from accel_state import ConfigurationError, DistributedType, GradientState, MicroStep


def _config(state, **kwargs):
    return StrategyConfig(state=state, precision=NoPrecision(device=state.device), **kwargs)


class _ReplacingStrategy(Strategy):
    """Replaces every parameter by a new Parameter object, as sharding does."""

    def prepare_model(self, model, *, device_placement=True, evaluation_mode=False):
        for module in model.modules():
            for name, param in list(module.named_parameters(recurse=False)):
                setattr(module, name, torch.nn.Parameter(param.detach().clone()))
        return model


def test_single_process_selects_single_and_a_named_strategy_is_checked(state, monkeypatch):
    assert type(select_strategy(_config(state))) is SingleDeviceStrategy
    monkeypatch.setenv("ACCEL_STRATEGY", "ddp")  # named: not asked whether it claims, but checked
    with pytest.raises(ConfigurationError, match=r"^Strategy 'ddp' \(named by ACCEL_STRATEGY .*\) "
                       r"cannot run here: DistributedDataParallel needs a process group, and "
                       r"this run of 1 process\(es\) has none\. Fix: start several processes"):
        select_strategy(_config(state))
    monkeypatch.setenv("ACCEL_STRATEGY", "dpp")
    with pytest.raises(ConfigurationError, match="Did you mean 'ddp'"):
        select_strategy(_config(state))


def test_a_named_ddp_runs_where_a_process_group_exists(state, gloo_group, monkeypatch):
    monkeypatch.setenv("ACCEL_STRATEGY", "ddp")
    assert type(select_strategy(_config(state))) is DDPStrategy


def test_selection_asks_strategies_by_priority(state):
    class Eager(Strategy):
        priority = 100

        @classmethod
        def claims(cls, config):
            return "eager" in config.plugins

    STRATEGIES.register("eager-test", Eager)
    try:
        assert type(select_strategy(_config(state, plugins={"eager": True}))) is Eager
        assert type(select_strategy(_config(state))) is SingleDeviceStrategy
    finally:
        STRATEGIES._clear()


def test_two_accepting_strategies_of_one_priority_are_refused_naming_both(state):
    class Twin(Strategy):
        priority = 100

        @classmethod
        def claims(cls, config):
            return "twin" in config.plugins

    STRATEGIES.register("twin-a", Twin)
    STRATEGIES.register("twin-b", type("OtherTwin", (Twin,), {}))
    try:
        with pytest.raises(ConfigurationError, match="twin-a, twin-b all claim.*same priority.*"
                           "ACCEL_STRATEGY"):
            select_strategy(_config(state, plugins={"twin": True}))
        assert type(select_strategy(_config(state))) is SingleDeviceStrategy  # not asked
    finally:
        STRATEGIES._clear()


def test_the_projects_strategies_have_distinct_priorities():
    from accel_parallel import strategy_classes

    found = strategy_classes()  # (presets have no priority: they are built only when named)
    priorities = [cls.priority for cls in found.values()]
    assert len(set(priorities)) == len(priorities), {n: c.priority for n, c in found.items()}


def test_ddp_claims_several_processes_only(state):
    assert not DDPStrategy.claims(_config(state))
    assert SingleDeviceStrategy.claims(_config(state))
    assert SingleDeviceStrategy.accepts(_config(state))  # the deprecated alias: claims + check
    built = DDPStrategy.from_config(_config(state, handlers={"ddp": None}))
    assert isinstance(built, DDPStrategy) and built.priority > SingleDeviceStrategy.priority


def test_prepare_groups_objects_and_applies_the_precision(state):
    strategy = SingleDeviceStrategy(state, precision=BF16Precision(device="cpu"))
    model = torch.nn.Linear(4, 4)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = [1, 2]
    out = strategy.prepare(PrepareRequest(models=[model], optimizers=[optimizer],
                                          dataloaders=[loader], device_placement=[True]))
    assert out.models == [model] and out.optimizers == [optimizer] and out.dataloaders == [loader]
    assert model(torch.ones(1, 4)).dtype == torch.float32  # autocast forward, fp32 outputs
    assert hasattr(model, "_original_forward")  # the precision wrapped it, not the facade
    assert strategy.unwrap_model(model, keep_fp32_wrapper=False) is model
    assert not hasattr(model, "_original_forward")


def test_optimizer_built_before_prepare_is_rebound(state):
    model = torch.nn.Linear(3, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0, momentum=0.9)
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()  # momentum state exists for the old parameters
    old = list(model.parameters())
    out = _ReplacingStrategy(state).prepare(PrepareRequest(models=[model],
                                                           optimizers=[optimizer]))
    new = list(out.models[0].parameters())
    assert all(n is not o for n, o in zip(new, old, strict=True))
    assert out.optimizers[0] is optimizer
    assert optimizer.param_groups[0]["params"] == new
    assert set(optimizer.state) == set(new)  # momentum buffers moved along
    before = new[0].detach().clone()
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    assert not torch.equal(new[0].detach(), before)  # the live parameters are stepped


def test_rebind_without_moves_changes_nothing():
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    params = list(optimizer.param_groups[0]["params"])
    assert rebind_optimizer(optimizer, {}) is optimizer
    assert optimizer.param_groups[0]["params"] == params


def test_step_hooks_divide_scale_step_and_clip(state):
    strategy = SingleDeviceStrategy(state)
    model = torch.nn.Linear(2, 1, bias=False)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    x = torch.ones(1, 2)
    strategy.backward(model(x).sum(), accumulation_steps=4)
    torch.testing.assert_close(model.weight.grad, torch.full((1, 2), 0.25))
    assert strategy.clip_grad_norm_(model.parameters(), 0.1) > 0.1
    strategy.clip_grad_value_(model.parameters(), 0.01)
    assert model.weight.grad.abs().max() <= 0.01
    before = model.weight.detach().clone()
    assert strategy.optimizer_step(optimizer) is True
    assert not torch.equal(before, model.weight.detach())
    strategy.zero_grad(optimizer)
    assert model.weight.grad is None
    assert strategy.scaler is None


def test_topology_and_checkpoint_defaults(state):
    strategy = SingleDeviceStrategy(state)
    assert (strategy.dp_rank, strategy.dp_size, strategy.dp_group) == (0, 1, None)
    assert strategy.parallel_sizes == {"dp_replicate": 1}
    assert strategy.parallel_ranks == {"dp_replicate": 0}
    assert strategy.distributed_type is DistributedType.NO
    assert strategy.checkpoint_format([torch.nn.Linear(1, 1)]) == "replicated"


def test_accumulation_context_defers_sync_through_no_sync(state, gloo_group):
    strategy = DDPStrategy(state)
    model = strategy.prepare_model(torch.nn.Linear(2, 2))
    accumulating = MicroStep()
    accumulating.sync = accumulating.reduce = False
    with strategy.accumulation_context([model], accumulating):
        assert model.require_backward_grad_sync is False
    assert model.require_backward_grad_sync is True
    accumulating.reduce = True  # sync_each_batch: reduced although the cycle goes on
    with strategy.accumulation_context([model], accumulating):
        assert model.require_backward_grad_sync is True
    with strategy.accumulation_context([model], BOUNDARY):
        assert model.require_backward_grad_sync is True
    GradientState._reset_state()


def test_plain_models_are_not_sharded_and_checkpoint_replicated(state):
    from accel_parallel import is_sharded_model

    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU())
    assert not is_sharded_model(model)
    assert DDPStrategy(state).checkpoint_format([model]) == "replicated"


def test_no_strategy_reads_the_process_wide_gradient_state():
    """The accumulation boundary reaches strategies through the interface (the
    ``MicroStep`` given to ``backward``, ``accumulation_context`` and ``should_step``, the
    request's ``accumulation_steps``), never through ``accel_state.GradientState``."""
    import ast
    from pathlib import Path

    import accel_parallel

    readers = []
    for path in sorted(Path(accel_parallel.__file__).parent.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.ImportFrom) else []
            if "GradientState" in names or (isinstance(node, ast.Name)
                                            and node.id == "GradientState"):
                readers.append(path.name)
    assert not readers, readers


def test_backward_hands_the_boundary_to_the_strategy(state):
    """DeepSpeed's engine is told the boundary that backward is given (no engine: a stand-in)."""
    from accel_parallel import DeepSpeedPlugin, DeepSpeedStrategy

    strategy = DeepSpeedStrategy(state, plugins={"default": DeepSpeedPlugin()})
    seen = []

    class Engine:
        skipped_steps = 0

        def set_gradient_accumulation_boundary(self, value):
            seen.append(value)

        def backward(self, loss, **kwargs):
            pass

        def step(self):
            pass

    strategy.engines["default"] = strategy._trained["default"] = Engine()
    micro = MicroStep()
    micro.sync = micro.reduce = False
    strategy.backward(torch.ones(()), accumulation_steps=4, micro_step=micro)
    strategy.backward(torch.ones(()), accumulation_steps=4)  # a direct call: a boundary
    assert seen == [False, True]
    assert not strategy.should_step(micro) and strategy.should_step(BOUNDARY)


def test_run_type_questions_the_facade_asks(state):
    """``runs_distributed`` (not ``NO``), ``multi_device`` (plain data parallelism over
    accelerators) and ``replicates_parameters`` (whole parameters, LocalSGD) answered from
    the strategy's run type, so the facade compares no ``DistributedType``."""
    from accel_parallel import SingleDeviceStrategy

    class Typed(SingleDeviceStrategy):
        kind = DistributedType.NO

        @property
        def distributed_type(self):
            return self.kind

    strategy = Typed(state)
    assert (strategy.runs_distributed, strategy.multi_device,
            strategy.replicates_parameters) == (False, False, True)
    for kind, replicated in [(DistributedType.FSDP, False), (DistributedType.DEEPSPEED, False),
                             (DistributedType.MULTI_CPU, True), (DistributedType.MULTI_GPU, True)]:
        strategy.kind = kind
        assert strategy.runs_distributed and strategy.replicates_parameters is replicated
        assert strategy.multi_device is False  # one process: not distributed over devices
