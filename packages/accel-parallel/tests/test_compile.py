"""torch.compile through the strategy: TorchDynamoPlugin (fields, environment, bad values),
whole-model and regional compilation, and the strategy hook that applies it."""

from __future__ import annotations

import pytest
import torch
from accel_parallel import (
    DynamoBackend,
    PrepareRequest,
    StrategyConfig,
    TorchDynamoPlugin,
    compile_regions,
    get_module_children_bottom_up,
    has_compiled_regions,
    is_compiled_module,
    recursive_getattr,
    select_strategy,
)
from accel_parallel.compile import compile_model
from accel_precision import NoPrecision
from accel_state import ConfigurationError, PartialState

_DYNAMO_VARS = ("BACKEND", "MODE", "USE_FULLGRAPH", "USE_DYNAMIC", "USE_REGIONAL_COMPILATION")


@pytest.fixture(autouse=True)
def _no_dynamo_env(monkeypatch):
    for suffix in _DYNAMO_VARS:
        monkeypatch.delenv(f"ACCEL_DYNAMO_{suffix}", raising=False)
        monkeypatch.delenv(f"ACCELERATE_DYNAMO_{suffix}", raising=False)
    torch._dynamo.reset()


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x):
        return torch.relu(self.linear(x)) + x


class Stack(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Linear(4, 8)
        self.blocks = torch.nn.ModuleList(Block() for _ in range(3))
        self.head = torch.nn.Linear(8, 2)

    def forward(self, x):
        x = self.embed(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def test_defaults_compile_nothing():
    plugin = TorchDynamoPlugin()
    assert plugin.backend is DynamoBackend.NO and not plugin.enabled
    assert (plugin.mode, plugin.fullgraph, plugin.dynamic) == ("default", False, None)
    assert plugin.use_regional_compilation is False
    model = torch.nn.Linear(2, 2)
    assert compile_model(model, plugin) is model
    assert compile_model(model, None) is model


def test_fields_come_from_accelerates_variables(monkeypatch):
    monkeypatch.setenv("ACCELERATE_DYNAMO_BACKEND", "AOT_EAGER")
    monkeypatch.setenv("ACCELERATE_DYNAMO_MODE", "max-autotune")
    monkeypatch.setenv("ACCELERATE_DYNAMO_USE_FULLGRAPH", "true")
    monkeypatch.setenv("ACCELERATE_DYNAMO_USE_DYNAMIC", "0")
    monkeypatch.setenv("ACCELERATE_DYNAMO_USE_REGIONAL_COMPILATION", "1")
    plugin = TorchDynamoPlugin()
    assert plugin.backend is DynamoBackend.AOT_EAGER
    assert (plugin.mode, plugin.fullgraph, plugin.dynamic) == ("max-autotune", True, False)
    assert plugin.use_regional_compilation is True
    # an explicit argument wins over the environment
    assert TorchDynamoPlugin(backend="eager", fullgraph=False).fullgraph is False
    assert TorchDynamoPlugin(backend="eager").backend is DynamoBackend.EAGER


def test_to_kwargs_are_torch_compiles_changed_arguments(monkeypatch):
    plugin = TorchDynamoPlugin(backend=DynamoBackend.INDUCTOR, dynamic=True)
    assert plugin.to_kwargs() == {"backend": "inductor", "dynamic": True}
    full = TorchDynamoPlugin(backend="eager", mode="max-autotune", fullgraph=True, dynamic=False,
                             disable=True)
    assert full.to_kwargs() == {"backend": "eager", "mode": "max-autotune", "fullgraph": True,
                                "dynamic": False, "disable": True}
    with_options = TorchDynamoPlugin(backend="inductor", options={"trace.enabled": False})
    assert "mode" not in with_options.to_kwargs()
    assert with_options.to_kwargs()["options"] == {"trace.enabled": False}
    assert with_options.to_dict()["backend"] == "inductor"
    # values read from the launcher's variables count as changed (Accelerate's test)
    monkeypatch.setenv("ACCELERATE_DYNAMO_BACKEND", "aot_eager")
    monkeypatch.setenv("ACCELERATE_DYNAMO_MODE", "reduce-overhead")
    assert TorchDynamoPlugin().to_kwargs() == {"backend": "aot_eager", "mode": "reduce-overhead"}


@pytest.mark.parametrize(("kwargs", "named"), [
    ({"backend": "turbo"}, ["'turbo'", "inductor", "eager"]),
    ({"backend": "eager", "mode": "fastest"}, ["'fastest'", "reduce-overhead"]),
    ({"backend": "eager", "mode": "max-autotune", "options": {"a": 1}}, ["mode", "options"]),
])
def test_bad_values_name_the_value_and_the_choices(kwargs, named):
    with pytest.raises(ConfigurationError) as error:
        TorchDynamoPlugin(**kwargs)
    for text in named:
        assert text in str(error.value)


def test_bad_backend_in_the_environment_is_named(monkeypatch):
    monkeypatch.setenv("ACCELERATE_DYNAMO_BACKEND", "nope")
    with pytest.raises(ConfigurationError, match="'nope'"):
        TorchDynamoPlugin()


def test_whole_model_compile_wraps_and_is_idempotent():
    torch.manual_seed(0)
    model, x = Stack(), torch.randn(5, 4)
    expected = model(x)
    plugin = TorchDynamoPlugin(backend="eager")
    compiled = compile_model(model, plugin)
    assert is_compiled_module(compiled) and compiled._orig_mod is model
    torch.testing.assert_close(compiled(x), expected)
    assert compile_model(compiled, plugin) is compiled  # already compiled: unchanged
    # in place (a strategy that shards afterwards): the module itself, names unchanged
    other = Stack()
    assert compile_model(other, plugin, in_place=True) is other
    assert has_compiled_regions(other) and not is_compiled_module(other)
    assert compile_model(other, plugin) is other


def test_regional_compilation_compiles_each_repeated_block_in_place():
    torch.manual_seed(0)
    model, x = Stack(), torch.randn(5, 4)
    expected, names = model(x), list(model.state_dict())
    plugin = TorchDynamoPlugin(backend="eager", use_regional_compilation=True)
    assert not has_compiled_regions(model)
    assert compile_model(model, plugin) is model
    assert all(block._compiled_call_impl is not None for block in model.blocks)
    assert model.embed._compiled_call_impl is None and model.head._compiled_call_impl is None
    assert list(model.state_dict()) == names  # no _orig_mod. prefix anywhere
    torch.testing.assert_close(model(x), expected)


def test_regional_compilation_follows_repeated_blocks_attribute():
    model = Stack()
    model._repeated_blocks = ["Linear"]  # transformers/diffusers name the block classes
    compile_regions(model, backend="eager")
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert linears and all(m._compiled_call_impl is not None for m in linears)
    # a model without repeated blocks is compiled whole, in place
    single = torch.nn.Linear(3, 3)
    assert compile_regions(single, backend="eager") is single
    assert single._compiled_call_impl is not None


def test_module_helpers():
    model = Stack()
    order = get_module_children_bottom_up(model)
    assert order[-1] is model and order.index(model.blocks[0].linear) < order.index(model.blocks)
    assert get_module_children_bottom_up(model, return_fn=True)[-1] == model.forward
    assert recursive_getattr(model, "blocks.1.linear.weight") is model.blocks[1].linear.weight


def test_strategy_compiles_prepared_models_after_wrapping():
    PartialState._reset_state()
    state = PartialState(cpu=True)
    try:
        plugin = TorchDynamoPlugin(backend="eager")
        strategy = select_strategy(StrategyConfig(
            state=state, precision=NoPrecision(device=state.device),
            plugins={"dynamo": plugin}))
        assert strategy.dynamo_plugin is plugin
        model = Stack()
        prepared = strategy.prepare(PrepareRequest(models=[model])).models[0]
        assert is_compiled_module(prepared)
        assert strategy.unwrap_model(prepared, keep_torch_compile=False) is model
        assert strategy.unwrap_model(prepared) is prepared
    finally:
        PartialState._reset_state()
