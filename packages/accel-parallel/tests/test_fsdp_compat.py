"""Accelerate's FSDP helpers: RAM-efficient loading switches, names, FSDP2 building blocks."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
import torch
from accel_parallel import FSDP2Strategy, FullyShardedDataParallelPlugin
from accel_parallel.fsdp.compat import (
    compile_regions_fsdp2,
    disable_fsdp_ram_efficient_loading,
    enable_fsdp_ram_efficient_loading,
    ensure_weights_retied,
    fsdp2_apply_ac,
    fsdp2_canonicalize_names,
    fsdp2_load_full_state_dict,
    fsdp2_prepare_auto_wrap_policy,
    fsdp2_prepare_model,
    fsdp2_switch_optimizer_parameters,
)
from accel_precision import NoPrecision
from accel_state import ConfigurationError, PartialState


def test_ram_efficient_loading_switches_reach_the_plugin(monkeypatch):
    for name in ("ACCEL_USE_FSDP", "ACCEL_FSDP_CPU_RAM_EFFICIENT_LOADING"):
        monkeypatch.setenv(name, "x")  # registered so monkeypatch restores (removes) them
        monkeypatch.delenv(name)
    enable_fsdp_ram_efficient_loading()
    assert os.environ["ACCEL_USE_FSDP"] == "true"
    plugin = FullyShardedDataParallelPlugin()
    assert plugin.cpu_ram_efficient_loading is True and plugin.sync_module_states is True
    disable_fsdp_ram_efficient_loading()
    assert FullyShardedDataParallelPlugin().cpu_ram_efficient_loading is False
    monkeypatch.setenv("ACCEL_USE_FSDP", "false")  # a choice already made is kept
    enable_fsdp_ram_efficient_loading()
    assert os.environ["ACCEL_USE_FSDP"] == "false"


def test_canonical_names_drop_checkpoint_and_compile_wrappers():
    weight = torch.zeros(1)
    named = {"_orig_mod.layers.0._checkpoint_wrapped_module.attn.weight": weight,
             "layers.1._orig_mod.mlp.bias": 1, "head.weight": 2}
    assert fsdp2_canonicalize_names(named) == {
        "layers.0.attn.weight": weight, "layers.1.mlp.bias": 1, "head.weight": 2}


# -- the FSDP2 building blocks (one process: FSDP2 on a one-process gloo group) ----------------

class _Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        return torch.relu(self.linear(x))


def _net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(_Block(), _Block(), torch.nn.Linear(4, 2))


@pytest.fixture
def fsdp_accelerator(gloo_group):
    """What the functions read of an accelerator: its FSDP2 strategy, device, main flag."""
    def make(**plugin_options):
        state = PartialState(cpu=True)
        strategy = FSDP2Strategy(state, precision=NoPrecision(),
                                 plugin=FullyShardedDataParallelPlugin(**plugin_options))
        return SimpleNamespace(strategy=strategy, device=state.device, is_main_process=True)
    return make


def test_auto_wrap_policy_marks_the_plugins_wrap_units():
    model = _net()
    blocks = FullyShardedDataParallelPlugin(auto_wrap_policy="TRANSFORMER_BASED_WRAP",
                                            transformer_cls_names_to_wrap=["_Block"])
    policy = fsdp2_prepare_auto_wrap_policy(blocks, model)
    assert [i for i, m in enumerate(model) if policy(m)] == [0, 1]
    assert not policy(model) and not policy(model[0].linear)
    size = FullyShardedDataParallelPlugin(auto_wrap_policy="SIZE_BASED_WRAP", min_num_params=20)
    assert [m for m in model.modules() if fsdp2_prepare_auto_wrap_policy(size, model)(m)] == [
        model[0].linear, model[1].linear]  # 20 parameters each; the head has 10
    assert fsdp2_prepare_auto_wrap_policy(
        FullyShardedDataParallelPlugin(auto_wrap_policy="NO_WRAP"), model) is None


def test_prepare_model_shards_like_prepare_and_apply_ac_checkpoints(fsdp_accelerator):
    from accel_parallel.fsdp.strategy import CheckpointedForward
    from torch.distributed.tensor import DTensor

    accelerator = fsdp_accelerator(auto_wrap_policy="TRANSFORMER_BASED_WRAP",
                                   transformer_cls_names_to_wrap=["_Block"])
    model = _net()
    expected = model(torch.ones(2, 4))
    assert fsdp2_apply_ac(accelerator, model) is model
    assert isinstance(model[0].forward, CheckpointedForward)
    assert not isinstance(model[2].forward, CheckpointedForward)  # not a wrap unit
    assert [n for n, _ in model.named_parameters()][0] == "0.linear.weight"  # names kept
    sharded = fsdp2_prepare_model(accelerator, model)
    assert sharded is model and isinstance(model[0].linear.weight, DTensor)
    assert hasattr(model[0], "unshard") and hasattr(model, "unshard")  # units and root
    assert not hasattr(model[2], "unshard")
    torch.testing.assert_close(model(torch.ones(2, 4)), expected)
    assert fsdp2_prepare_model(accelerator, model) is model  # already sharded: unchanged


def test_load_full_state_dict_fills_shards_of_a_meta_model(fsdp_accelerator):
    from torch.distributed.tensor import DTensor

    accelerator = fsdp_accelerator()
    source = _net()
    with torch.device("meta"):
        model = torch.nn.Sequential(_Block(), _Block(), torch.nn.Linear(4, 2))
    from accel_parallel.fsdp.torch_fsdp import fsdp2

    fsdp2().fully_shard(model, mesh=accelerator.strategy.fsdp_mesh)
    assert model[2].weight.is_meta
    assert fsdp2_load_full_state_dict(accelerator, model, source.state_dict()) is model
    assert isinstance(model[2].weight, DTensor) and not model[2].weight.is_meta
    torch.testing.assert_close(model(torch.ones(3, 4)), source(torch.ones(3, 4)))


def test_functions_needing_fsdp_refuse_another_strategy():
    other = SimpleNamespace(strategy=object())
    for fn in (fsdp2_prepare_model, fsdp2_apply_ac):
        with pytest.raises(ConfigurationError, match=f"{fn.__name__} needs an accelerator "
                           "running FSDP, but it runs object.*fsdp_plugin"):
            fn(other, _net())


def test_switch_optimizer_parameters_moves_groups_and_state():
    model = torch.nn.Linear(2, 2)
    extra = torch.nn.Parameter(torch.zeros(1))  # not the model's: kept as it is
    optimizer = torch.optim.Adam([*model.parameters(), extra])
    model(torch.ones(1, 2)).sum().backward()
    optimizer.step()
    old = list(model.parameters())
    new = [torch.nn.Parameter(p.detach().clone()) for p in old]
    mapping = {o.data_ptr(): n for o, n in zip(old, new, strict=True)}
    fsdp2_switch_optimizer_parameters(optimizer, mapping,
                                      model_owned_parameter_ids=[id(p) for p in old])
    assert optimizer.param_groups[0]["params"] == [*new, extra]
    assert all(p in optimizer.state for p in new) and not any(p in optimizer.state for p in old)
    stray = torch.optim.SGD(old, lr=0.1)
    with pytest.raises(KeyError, match=r"shape \(2,\).*no entry in the mapping"):
        fsdp2_switch_optimizer_parameters(stray, {old[0].data_ptr(): new[0]},
                                          model_owned_parameter_ids=[id(p) for p in old])


class _Tied(torch.nn.Module):
    _tied_weights_keys = ["head.weight"]

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(5, 3)
        self.head = torch.nn.Linear(3, 5, bias=False)
        self.head.weight = self.embed.weight


def _reallocate(module: torch.nn.Module) -> torch.nn.Module:
    """An FSDP1-style param_init_fn that gives the module's own parameters new objects (as
    ``to_empty`` does when torch overwrites parameters on conversion)."""
    for name, param in list(module.named_parameters(recurse=False)):
        setattr(module, name, torch.nn.Parameter(torch.empty_like(param, device="cpu")))
    return module


def test_ensure_weights_retied_keeps_tied_parameters_one():
    untied = _Tied()
    for module in untied.modules():
        _reallocate(module)
    assert untied.head.weight is not untied.embed.weight  # what the wrapper prevents

    model = _Tied()
    init = ensure_weights_retied(_reallocate, model, torch.device("cpu"))
    assert init is not _reallocate
    old = model.embed.weight
    for module in model.modules():
        assert init(module) is module
    assert model.head.weight is model.embed.weight and model.embed.weight is not old
    plain = torch.nn.Linear(2, 2)  # no tied keys: the function itself
    assert ensure_weights_retied(_reallocate, plain, "cpu") is _reallocate


def test_compile_regions_fsdp2_compiles_blocks_in_place():
    from accel_parallel.compile import has_compiled_regions

    model = torch.nn.Sequential(_Block(), _Block(), torch.nn.Linear(4, 2))
    names = [n for n, _ in model.named_parameters()]
    assert compile_regions_fsdp2(model, backend="eager") is model
    assert has_compiled_regions(model) and [n for n, _ in model.named_parameters()] == names
    with pytest.raises(ConfigurationError, match="compile_regions_fsdp2.*needs an nn.Module"):
        compile_regions_fsdp2(object())


def test_get_parameters_from_modules_takes_modules_or_a_name_regex():
    from accel_parallel.fsdp.compat import get_parameters_from_modules

    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Sequential(torch.nn.Linear(2, 3)))
    inner = model[1][0]
    assert get_parameters_from_modules(None, model, "cpu") == set()
    assert get_parameters_from_modules([inner], model, "cpu") == {inner.weight, inner.bias}
    assert get_parameters_from_modules(r"1\.0", model, "cpu") == {inner.weight, inner.bias}
    # a regex fullmatches module names: "0" is model[0] only, not "1.0"
    assert get_parameters_from_modules("0", model, "cpu") == {model[0].weight, model[0].bias}
    assert get_parameters_from_modules("no_such", model, "cpu") == set()


def test_get_module_class_from_name_finds_the_first_module_of_that_class():
    from accel_parallel.fsdp.compat import get_module_class_from_name

    class Block(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = torch.nn.Linear(2, 2)

    model = torch.nn.Sequential(torch.nn.ReLU(), Block(), Block())
    assert get_module_class_from_name(model, "Block") is Block
    assert get_module_class_from_name(model, "Linear") is torch.nn.Linear
    assert get_module_class_from_name(model, "Sequential") is torch.nn.Sequential  # itself
    assert get_module_class_from_name(model, "NoSuchBlock") is None
