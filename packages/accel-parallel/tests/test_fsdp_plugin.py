"""FullyShardedDataParallelPlugin: Accelerate's spellings, env fallback, FSDP2 resolution."""

from __future__ import annotations

import os
import warnings

import accel_parallel.fsdp.plugin as fsdp_plugin
import pytest
import torch
from accel_parallel.fsdp.plugin import (
    FSDP_AUTO_WRAP_POLICY,
    FSDP_SHARDING_STRATEGY,
    FSDP_STATE_DICT_TYPE,
)
from accel_parallel.fsdp.plugin import FullyShardedDataParallelPlugin as Plugin
from accel_state import ConfigurationError
from torch import nn
from torch.distributed.fsdp import (
    BackwardPrefetch,
    CPUOffload,
    CPUOffloadPolicy,
    MixedPrecision,
    MixedPrecisionPolicy,
    ShardingStrategy,
    StateDictType,
)
from torch.distributed.fsdp.wrap import size_based_auto_wrap_policy


@pytest.fixture(autouse=True)
def _no_fsdp_env(monkeypatch):
    for key in list(os.environ):
        if key.startswith("FSDP_"):
            monkeypatch.delenv(key)
    monkeypatch.setattr(fsdp_plugin, "_fsdp1_notice_shown", False)


class Block(nn.Module):
    def __init__(self, width: int = 4):
        super().__init__()
        self.fc = nn.Linear(width, width)


class Model(nn.Module):
    def __init__(self, n: int = 3, no_split: list[str] | None = None):
        super().__init__()
        self.embed = nn.Linear(4, 4)
        self.layers = nn.ModuleList(Block() for _ in range(n))
        self.head = nn.Linear(4, 2)
        if no_split is not None:
            self._no_split_modules = no_split


def test_constants():
    assert FSDP_SHARDING_STRATEGY[0] == "FULL_SHARD" and len(FSDP_SHARDING_STRATEGY) == 5
    assert "TRANSFORMER_BASED_WRAP" in FSDP_AUTO_WRAP_POLICY
    assert "SHARDED_STATE_DICT" in FSDP_STATE_DICT_TYPE


def test_defaults():
    p = Plugin()
    assert p.fsdp_version == 2
    assert (p.sharding, p.reshard_after_forward, p.hybrid, p.replicate_only) == (
        "FULL_SHARD", True, False, False)
    assert p.sharding_strategy is ShardingStrategy.FULL_SHARD
    assert p.auto_wrap_policy == "NO_WRAP" and p.min_num_params == 100_000_000
    assert p.cpu_offload is False and p.activation_checkpointing is False
    assert p.state_dict_type is StateDictType.SHARDED_STATE_DICT
    assert p.sync_module_states is True and p.cpu_ram_efficient_loading is False
    assert p.mixed_precision_policy is None and p.use_orig_params is True


@pytest.mark.parametrize("name,reshard,hybrid,replicate", [
    ("FULL_SHARD", True, False, False), ("SHARD_GRAD_OP", False, False, False),
    ("NO_SHARD", False, False, True), ("HYBRID_SHARD", True, True, False),
    ("HYBRID_SHARD_ZERO2", False, True, False)])
def test_every_strategy_spelling(name, reshard, hybrid, replicate):
    code = FSDP_SHARDING_STRATEGY.index(name) + 1
    enum = ShardingStrategy["_HYBRID_SHARD_ZERO2" if name == "HYBRID_SHARD_ZERO2" else name]
    for spelling in (name, name.lower(), code, str(code), enum):
        for field in ("sharding_strategy", "reshard_after_forward"):
            p = Plugin(**{field: spelling})
            assert (p.sharding, p.reshard_after_forward, p.hybrid, p.replicate_only) == (
                name, reshard, hybrid, replicate), (field, spelling)
            assert p.sharding_strategy is enum


@pytest.mark.parametrize("value,expected", [
    (True, "FULL_SHARD"), (False, "SHARD_GRAD_OP"), ("true", "FULL_SHARD"),
    ("false", "SHARD_GRAD_OP"), ("0", "SHARD_GRAD_OP")])
def test_reshard_after_forward_bool(value, expected):
    p = Plugin(reshard_after_forward=value)
    assert p.sharding == expected and p.reshard_after_forward is (expected == "FULL_SHARD")


def test_env_fallback_and_precedence(monkeypatch):
    monkeypatch.setenv("FSDP_SHARDING_STRATEGY", "2")
    assert Plugin().sharding == "SHARD_GRAD_OP"
    assert Plugin(sharding_strategy="FULL_SHARD").sharding == "FULL_SHARD"
    assert Plugin(reshard_after_forward=True).sharding == "FULL_SHARD"  # args beat env
    monkeypatch.delenv("FSDP_SHARDING_STRATEGY")
    monkeypatch.setenv("FSDP_RESHARD_AFTER_FORWARD", "false")
    assert Plugin().reshard_after_forward is False
    monkeypatch.setenv("FSDP_RESHARD_AFTER_FORWARD", "HYBRID_SHARD")
    assert Plugin().hybrid is True
    monkeypatch.setenv("ACCEL_FSDP_RESHARD_AFTER_FORWARD", "NO_SHARD")  # canonical name wins
    assert Plugin().replicate_only is True


def test_other_fields_from_env(monkeypatch):
    for key, value in {"FSDP_AUTO_WRAP_POLICY": "SIZE_BASED_WRAP", "FSDP_MIN_NUM_PARAMS": "7",
                       "FSDP_OFFLOAD_PARAMS": "true", "FSDP_ACTIVATION_CHECKPOINTING": "1",
                       "FSDP_STATE_DICT_TYPE": "FULL_STATE_DICT", "FSDP_SYNC_MODULE_STATES": "0",
                       "FSDP_TRANSFORMER_CLS_TO_WRAP": "Block, Linear",
                       "FSDP_VERSION": "2"}.items():
        monkeypatch.setenv(key, value)
    p = Plugin()
    assert p.auto_wrap_policy == "SIZE_BASED_WRAP" and p.min_num_params == 7
    assert p.cpu_offload is True and p.activation_checkpointing is True
    assert p.state_dict_type is StateDictType.FULL_STATE_DICT and p.sync_module_states is False
    assert p.transformer_cls_names_to_wrap == ["Block", "Linear"]
    q = Plugin(auto_wrap_policy="NO_WRAP", min_num_params=3, cpu_offload=False,
               activation_checkpointing=False, state_dict_type="SHARDED",
               transformer_cls_names_to_wrap="Block")
    assert (q.auto_wrap_policy, q.min_num_params, q.cpu_offload, q.activation_checkpointing) == (
        "NO_WRAP", 3, False, False)
    assert q.state_dict_type is StateDictType.SHARDED_STATE_DICT
    assert q.transformer_cls_names_to_wrap == ["Block"]
    monkeypatch.setenv("FSDP_CPU_RAM_EFFICIENT_LOADING", "true")
    assert Plugin().sync_module_states is True  # forced by cpu_ram_efficient_loading


def test_conflicting_sharding_and_reshard():
    with pytest.raises(ConfigurationError, match="sharding_strategy.*reshard_after_forward"):
        Plugin(sharding_strategy="FULL_SHARD", reshard_after_forward=False)
    with pytest.raises(ConfigurationError, match="disagree"):
        Plugin(sharding_strategy="FULL_SHARD", reshard_after_forward="SHARD_GRAD_OP")
    p = Plugin(sharding_strategy="SHARD_GRAD_OP", reshard_after_forward=False)
    assert p.sharding == "SHARD_GRAD_OP"


def test_env_conflict_names_env_vars(monkeypatch):
    monkeypatch.setenv("FSDP_SHARDING_STRATEGY", "FULL_SHARD")
    monkeypatch.setenv("FSDP_RESHARD_AFTER_FORWARD", "false")
    with pytest.raises(ConfigurationError, match="ACCEL_FSDP_SHARDING_STRATEGY"):
        Plugin()


@pytest.mark.parametrize("kwargs,match", [
    ({"sharding_strategy": "ZERO3"}, "ZERO3.*FULL_SHARD"),
    ({"sharding_strategy": 9}, "9"),
    ({"reshard_after_forward": "maybe"}, "maybe"),
    ({"auto_wrap_policy": "LAMBDA_WRAP"}, "LAMBDA_WRAP.*TRANSFORMER_BASED_WRAP"),
    ({"state_dict_type": "LOCAL_STATE_DICT"}, "LOCAL_STATE_DICT.*FSDP2"),
    ({"state_dict_type": StateDictType.LOCAL_STATE_DICT}, "LOCAL_STATE_DICT"),
    ({"state_dict_type": "PICKLE"}, "PICKLE.*SHARDED_STATE_DICT"),
    ({"fsdp_version": 3}, "fsdp_version=3"),
    ({"mixed_precision_policy": {"param_dtyp": "bf16"}}, "param_dtyp.*param_dtype"),
    ({"mixed_precision_policy": {"param_dtype": "int8"}}, "int8.*bf16"),
    ({"mixed_precision_policy": "bf16"}, "MixedPrecisionPolicy"),
    ({"min_num_params": "lots"}, "lots"),
    ({"cpu_offload": "sometimes"}, "sometimes"),
    ({"ignored_modules": "(["}, "regex"),
])
def test_bad_values(kwargs, match):
    with pytest.raises(ConfigurationError, match=match):
        Plugin(**kwargs)


def test_fsdp_version_1_notice_once():
    with pytest.warns(UserWarning, match="run as FSDP2"):
        p = Plugin(fsdp_version=1, sharding_strategy=1, backward_prefetch="BACKWARD_PRE")
    assert p.fsdp_version == 1 and p.reshard_after_forward is True
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Plugin(fsdp_version="1")  # second time: silent


def test_fsdp_version_env(monkeypatch):
    monkeypatch.setenv("FSDP_VERSION", "1")
    with pytest.warns(UserWarning):
        assert Plugin().fsdp_version == 1
    assert Plugin(fsdp_version=2).fsdp_version == 2


@pytest.mark.parametrize("kwargs,name", [
    ({"use_orig_params": False}, "use_orig_params"),
    ({"forward_prefetch": True}, "forward_prefetch"),
    ({"backward_prefetch": "BACKWARD_POST"}, "backward_prefetch"),
    ({"backward_prefetch": BackwardPrefetch.BACKWARD_POST}, "backward_prefetch"),
    ({"backward_prefetch": "SOMETIMES"}, "backward_prefetch"),
    ({"limit_all_gathers": False}, "limit_all_gathers"),
    ({"param_init_fn": lambda m: m}, "param_init_fn"),
    ({"mixed_precision_policy": MixedPrecision(keep_low_precision_grads=True)},
     "keep_low_precision_grads"),
])
def test_fsdp1_only_options_without_equivalent(kwargs, name):
    with pytest.raises(ConfigurationError, match=name):
        Plugin(**kwargs)


def test_fsdp1_only_options_with_equivalent(monkeypatch):
    p = Plugin(use_orig_params=True, forward_prefetch=False, limit_all_gathers=True,
               backward_prefetch=BackwardPrefetch.BACKWARD_PRE)
    assert p.backward_prefetch == "BACKWARD_PRE"
    assert Plugin(backward_prefetch="NO_PREFETCH").backward_prefetch == "NO_PREFETCH"
    monkeypatch.setenv("FSDP_USE_ORIG_PARAMS", "false")
    with pytest.raises(ConfigurationError, match="use_orig_params"):
        Plugin()


def test_mixed_precision_spellings():
    p = Plugin(mixed_precision_policy={"param_dtype": "bf16", "reduce_dtype": "float32",
                                       "output_dtype": torch.float16,
                                       "cast_forward_inputs": False})
    mp = p.mixed_precision_policy
    assert isinstance(mp, MixedPrecisionPolicy)
    assert (mp.param_dtype, mp.reduce_dtype, mp.output_dtype, mp.cast_forward_inputs) == (
        torch.bfloat16, torch.float32, torch.float16, False)
    given = MixedPrecisionPolicy(param_dtype=torch.float16)
    assert Plugin(mixed_precision_policy=given).mixed_precision_policy is given
    fsdp1 = Plugin(mixed_precision_policy=MixedPrecision(param_dtype=torch.bfloat16,
                                                         buffer_dtype=torch.bfloat16))
    assert fsdp1.mixed_precision_policy.param_dtype is torch.bfloat16


def test_set_mixed_precision():
    p = Plugin()
    p.set_mixed_precision("no")
    assert p.mixed_precision_policy is None
    p.set_mixed_precision("bf16")
    assert p.mixed_precision_policy.param_dtype is torch.bfloat16
    p.set_mixed_precision("fp16")  # already given: kept
    assert p.mixed_precision_policy.param_dtype is torch.bfloat16
    p.set_mixed_precision("fp16", override=True)
    assert p.mixed_precision_policy.reduce_dtype is torch.float16
    with pytest.raises(ConfigurationError, match="int4"):
        p.set_mixed_precision("int4")


def test_cpu_offload_spellings_and_cpu_device():
    assert Plugin(cpu_offload=CPUOffload(offload_params=True)).cpu_offload is True
    assert Plugin(cpu_offload=CPUOffloadPolicy()).cpu_offload is True
    p = Plugin(cpu_offload=True)
    with pytest.raises(ConfigurationError, match="needs an accelerator"):
        p.validate_cpu_offload(torch.device("cpu"))
    p.validate_cpu_offload("cuda")
    Plugin().validate_cpu_offload("cpu")


def test_state_dict_type_spellings():
    for spelling in ("FULL_STATE_DICT", "full", "1", StateDictType.FULL_STATE_DICT):
        p = Plugin(state_dict_type=spelling)
        assert p.state_dict_type is StateDictType.FULL_STATE_DICT
        assert p.state_dict_config.rank0_only is True
    p = Plugin()
    p.set_state_dict_type("FULL_STATE_DICT")
    assert p.state_dict_type is StateDictType.FULL_STATE_DICT


def test_modules_to_shard_transformer_names():
    model = Model()
    p = Plugin(auto_wrap_policy="TRANSFORMER_BASED_WRAP", transformer_cls_names_to_wrap=["Block"])
    chosen = p.modules_to_shard(model)
    assert chosen == list(reversed(list(model.layers)))
    assert model not in chosen
    alias = Plugin(auto_wrap_policy="transformer_auto_wrap", transformer_cls_names_to_wrap=Block)
    assert len(alias.modules_to_shard(model)) == 3  # a class works too (Accelerate-style sets)


def test_modules_to_shard_no_split_modules():
    inner = Model(no_split=["Block", "GoneBlock"])
    outer = nn.Sequential(inner)
    p = Plugin(auto_wrap_policy="TRANSFORMER_BASED_WRAP")
    assert set(map(id, p.set_auto_wrap_policy(outer))) == set(map(id, inner.layers))


def test_transformer_wrap_errors():
    p = Plugin(auto_wrap_policy="TRANSFORMER_BASED_WRAP")
    with pytest.raises(ConfigurationError, match="transformer_cls_names_to_wrap.*_no_split_modules"):
        p.modules_to_shard(Model())
    q = Plugin(auto_wrap_policy="TRANSFORMER_BASED_WRAP",
               transformer_cls_names_to_wrap="Block,LlamaDecoderLayer")
    with pytest.raises(ConfigurationError, match="LlamaDecoderLayer.*Block.*Linear"):
        q.modules_to_shard(Model())


def test_modules_to_shard_size_based():
    model = Model()  # each Linear(4, 4) has 20 parameters
    chosen = Plugin(auto_wrap_policy="SIZE_BASED_WRAP", min_num_params=20).modules_to_shard(model)
    assert all(isinstance(m, nn.Linear) for m in chosen) and len(chosen) == 4
    big = Plugin(auto_wrap_policy="SIZE_BASED_WRAP", min_num_params=60).modules_to_shard(model)
    assert big == [model.layers]  # 3 x 20 unsharded below it; never the root
    assert Plugin(auto_wrap_policy="SIZE_BASED_WRAP").modules_to_shard(model) == []


def test_modules_to_shard_callable_none_and_ignored():
    model = Model()
    p = Plugin(auto_wrap_policy=lambda m: isinstance(m, Block))
    assert len(p.modules_to_shard(model)) == 3
    assert Plugin(auto_wrap_policy="NO_WRAP").modules_to_shard(model) == []
    torch_policy = Plugin(auto_wrap_policy=lambda module, recurse, nonwrapped_numel:
                          size_based_auto_wrap_policy(module, recurse, nonwrapped_numel, 60))
    stack = nn.Sequential(nn.Sequential(Block(), Block(), Block()), nn.Linear(4, 2))
    assert torch_policy.modules_to_shard(stack) == [stack[0]]  # torch's rule: total >= 60
    ignored = Plugin(auto_wrap_policy=lambda m: isinstance(m, Block), ignored_modules=r"layers\.0")
    assert model.layers[0] not in ignored.modules_to_shard(model)
    assert ignored.ignored_params(model) == set(model.layers[0].parameters())
    listed = Plugin(ignored_modules=[model.head])
    assert listed.ignored_params(model) == set(model.head.parameters())


def test_fp16_with_fsdp2_needs_a_shardable_scaler_and_torch_2_5(monkeypatch):
    from accel_parallel.fsdp import sharding as fsdp
    from accel_precision import FP16Precision, Precision

    class ScalingPrecision(Precision):  # scales the loss but cannot share its inf check
        name = "custom-fp16"
        scaler = torch.amp.GradScaler("cpu")

    with pytest.raises(ConfigurationError, match="custom-fp16.*adapt_to_sharding"):
        fsdp.adapt_precision(ScalingPrecision())
    fsdp.adapt_precision(Precision())  # nothing to adapt: fine
    monkeypatch.setattr(fsdp, "is_torch_version", lambda op, version: True)
    with pytest.raises(ConfigurationError, match=r"needs torch>=2\.5.*bf16"):
        fsdp.adapt_precision(FP16Precision(device="cpu"))
