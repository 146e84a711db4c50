"""ParallelismConfig: validation, the environment, derived dimension names, the mesh; the N-D
strategy's refusals (sizes vs world, FSDP plugin disagreeing, Ulysses SP, CP on a CPU)."""

from __future__ import annotations

import pytest
import torch
from accel_parallel import (
    FullyShardedDataParallelPlugin,
    ParallelismConfig,
    ParallelismStrategy,
    StrategyConfig,
    TorchContextParallelConfig,
    TorchTensorParallelConfig,
    TorchTensorParallelPlugin,
    select_strategy,
)
from accel_parallel.mesh.context_parallel import check_context_parallel_device
from accel_parallel.mesh.sizes import check_plugin_agrees, resolve_parallelism
from accel_precision import NoPrecision
from accel_state import ConfigurationError


@pytest.fixture(autouse=True)
def _no_parallelism_env(monkeypatch):
    for name in ("DP_REPLICATE_SIZE", "DP_SHARD_SIZE", "TP_SIZE", "CP_SIZE", "CP_BACKEND",
                 "CP_COMM_STRATEGY", "SP_SIZE", "SP_BACKEND"):
        monkeypatch.delenv(f"PARALLELISM_CONFIG_{name}", raising=False)
        monkeypatch.delenv(f"ACCEL_PARALLELISM_CONFIG_{name}", raising=False)


def test_defaults_are_ones_and_sizes_come_from_the_environment(monkeypatch):
    config = ParallelismConfig()
    assert config.sizes == {"pp": 1, "dp_replicate": 1, "dp_shard": 1, "cp": 1, "sp": 1,
                            "tp": 1}
    assert (config.cp_backend, config.sp_backend, config.tp_handler) == ("torch", "deepspeed",
                                                                          None)
    monkeypatch.setenv("PARALLELISM_CONFIG_TP_SIZE", "2")
    monkeypatch.setenv("PARALLELISM_CONFIG_DP_SHARD_SIZE", "4")
    monkeypatch.setenv("PARALLELISM_CONFIG_CP_COMM_STRATEGY", "alltoall")
    config = ParallelismConfig(cp_size=2)
    assert (config.tp_size, config.dp_shard_size, config.cp_size) == (2, 4, 2)
    assert isinstance(config.tp_handler, TorchTensorParallelConfig)  # default handler
    assert config.cp_handler.cp_comm_strategy == "alltoall"
    assert ParallelismConfig(tp_size=1).tp_size == 1  # an argument wins over the env
    monkeypatch.setenv("PARALLELISM_CONFIG_TP_SIZE", "two")
    with pytest.raises(ConfigurationError, match=r"PARALLELISM_CONFIG_TP_SIZE \(env\)='two'"):
        ParallelismConfig()


@pytest.mark.parametrize("kwargs, message", [
    ({"tp_size": 0}, r"tp_size=0 must be an integer >= 1"),
    ({"dp_shard_size": True}, r"dp_shard_size=True must be an integer"),
    ({"cp_size": "x"}, r"cp_size='x'"),
    ({"cp_backend": "ring"}, r"cp_backend='ring' is not valid; use one of torch"),
    ({"sp_backend": "magic"},
     r"sp_backend='magic' is not valid; use one of deepspeed, torch, accelerate"),
    ({"cp_size": 2, "sp_size": 2}, r"cp_size=2 and sp_size=2"),
    ({"tp_handler": {"enable_async_tp": True}}, r"tp_handler=.* must be a "
                                                r"TorchTensorParallelConfig"),
    ({"cp_handler": TorchTensorParallelConfig()}, r"must be a TorchContextParallelConfig"),
])
def test_bad_values_are_refused_with_the_value_named(kwargs, message):
    with pytest.raises(ConfigurationError, match=message):
        ParallelismConfig(**kwargs)


def test_handlers_validate_their_fields():
    with pytest.raises(ConfigurationError, match="Invalid cp_comm_strategy: ring; use one "
                                                 "of allgather, alltoall"):
        TorchContextParallelConfig(cp_comm_strategy="ring")
    with pytest.raises(ConfigurationError, match="enable_async_tp"):
        TorchTensorParallelConfig(enable_async_tp="yes")
    with pytest.raises(ConfigurationError, match="tp_plan=.* must be a dict"):
        TorchTensorParallelConfig(tp_plan=["colwise"])


def test_dimension_names_follow_accelerate():
    tp_fsdp = ParallelismConfig(dp_shard_size=2, tp_size=2)
    assert tp_fsdp.active_mesh_dims == ["dp_shard", "tp"]
    assert (tp_fsdp.total_size, tp_fsdp.data_parallel_size, tp_fsdp.non_data_parallel_size) == (
        4, 2, 2)
    assert tp_fsdp.dp_dim_names == ["dp_shard"] and tp_fsdp.non_dp_dim_names == ["tp"]
    assert tp_fsdp.fsdp_dim_names == ["dp_shard_cp"] and tp_fsdp.fsdp_enabled
    hsdp_cp = ParallelismConfig(dp_replicate_size=2, dp_shard_size=2, cp_size=2)
    assert hsdp_cp.dp_shard_cp_dim_names == ["dp_shard", "cp"]
    assert hsdp_cp.dp_cp_dim_names == ["dp_replicate", "dp_shard", "cp"]
    assert hsdp_cp.fsdp_dim_names == ["dp_replicate", "dp_shard_cp"]
    assert hsdp_cp.active_mesh_dims == ["dp_replicate", "dp_shard", "cp"]
    assert hsdp_cp.dp_enabled and hsdp_cp.cp_enabled and not hsdp_cp.tp_enabled
    assert not ParallelismConfig().dp_enabled and not ParallelismConfig().fsdp_enabled


def test_world_size_error_names_every_size_and_to_json_is_plain_data():
    config = ParallelismConfig(dp_shard_size=3, tp_size=2)
    with pytest.raises(ConfigurationError) as error:
        config.check_world_size(4)
    for part in ("dp_replicate_size=1", "dp_shard_size=3", "cp_size=1", "sp_size=1",
                 "tp_size=2", "spans 6", "has 4"):
        assert part in str(error.value), part
    data = config.to_json()
    assert data["tp_handler"] == {"enable_async_tp": False, "tp_plan": None}
    assert "device_mesh" not in data and data["dp_shard_size"] == 3


def test_resolution_for_a_world():
    assert resolve_parallelism(ParallelismConfig(), None, 4).dp_replicate_size == 4  # DDP
    implied = resolve_parallelism(ParallelismConfig(), None, 4, FullyShardedDataParallelPlugin())
    assert (implied.dp_replicate_size, implied.dp_shard_size) == (1, 4)  # the plugin's mesh
    with pytest.warns(FutureWarning, match="TorchTensorParallelPlugin is deprecated"):
        plugin = TorchTensorParallelPlugin(tp_size=2)
    config = resolve_parallelism(None, plugin, 4)
    assert (config.tp_size, config.dp_replicate_size) == (2, 2)
    with pytest.raises(ConfigurationError, match="tp_size=2\\) and ParallelismConfig\\(tp_size=1"):
        resolve_parallelism(ParallelismConfig(tp_size=1), plugin, 2)
    with pytest.raises(ConfigurationError, match="does not divide the 3 processes"):
        resolve_parallelism(None, plugin, 3)
    assert resolve_parallelism(ParallelismConfig(sp_size=2), None, 2).sp_size == 2  # Ulysses
    with pytest.warns(UserWarning, match="cp_handler is set but cp_size is 1"):
        resolve_parallelism(ParallelismConfig(cp_handler=TorchContextParallelConfig()), None, 1)


def test_an_fsdp_plugin_must_describe_the_same_mesh():
    hybrid = FullyShardedDataParallelPlugin(sharding_strategy="HYBRID_SHARD")
    with pytest.raises(ConfigurationError, match="'HYBRID_SHARD'.*is not hybrid"):
        check_plugin_agrees(ParallelismConfig(dp_shard_size=4), hybrid)
    check_plugin_agrees(ParallelismConfig(dp_replicate_size=2, dp_shard_size=2), hybrid)
    no_shard = FullyShardedDataParallelPlugin(sharding_strategy="NO_SHARD")
    with pytest.raises(ConfigurationError, match="NO_SHARD.*shards over 2 processes"):
        check_plugin_agrees(ParallelismConfig(dp_shard_size=2), no_shard)
    with pytest.raises(ConfigurationError, match="'FULL_SHARD'.*nothing to shard"):
        check_plugin_agrees(ParallelismConfig(tp_size=2), FullyShardedDataParallelPlugin())
    check_plugin_agrees(ParallelismConfig(), FullyShardedDataParallelPlugin())  # one process


def test_context_parallel_needs_cuda():
    check_context_parallel_device(1, torch.device("cpu"))  # off: nothing to check
    with pytest.raises(ConfigurationError, match=r"cp_size=2\) needs CUDA.*device is cpu"):
        check_context_parallel_device(2, torch.device("cpu"))


def test_the_nd_strategy_is_chosen_by_a_parallelism_config(state):
    import torch.distributed as dist

    plain = StrategyConfig(state=state, precision=NoPrecision())
    assert not ParallelismStrategy.accepts(plain)
    sizes = ParallelismConfig()
    config = StrategyConfig(state=state, precision=NoPrecision(),
                            plugins={"parallelism_config": sizes})
    assert ParallelismStrategy.accepts(config)
    assert not ParallelismStrategy.accepts(StrategyConfig(
        state=state, precision=NoPrecision(),
        plugins={"parallelism_config": ParallelismConfig(), "deepspeed": object()}))
    try:
        strategy = select_strategy(config)
        assert isinstance(strategy, ParallelismStrategy) and strategy.dp_size == 1
        assert strategy.device_mesh.mesh_dim_names == ("dp_replicate",)
        assert strategy.parallelism_config is sizes and sizes.device_mesh is strategy.mesh
        assert sizes.get_device_mesh("cpu") is strategy.mesh
        assert sizes.get_submesh("dp").size() == 1
        with pytest.raises(ConfigurationError, match="built for 'cpu', not 'cuda'"):
            sizes.get_device_mesh("cuda")
        model = strategy.prepare_model(torch.nn.Linear(2, 2))
        assert not isinstance(model, torch.nn.parallel.DistributedDataParallel)  # one process
    finally:
        dist.destroy_process_group()
    with pytest.raises(ConfigurationError, match="pass a device_type"):
        ParallelismConfig().get_device_mesh()


@pytest.mark.parametrize("sizes, names, shape", [
    ({"dp_replicate_size": 8}, ("dp_replicate",), (8,)),
    ({"dp_replicate_size": 2, "dp_shard_size": 4}, ("dp_replicate", "dp_shard"), (2, 4)),
    ({"dp_shard_size": 2, "cp_size": 2, "tp_size": 2}, ("dp_shard", "cp", "tp"), (2, 2, 2)),
    ({"dp_replicate_size": 2, "dp_shard_size": 2, "cp_size": 2, "tp_size": 2},
     ("dp_replicate", "dp_shard", "cp", "tp"), (2, 2, 2, 2)),
    ({}, None, None),
])
def test_get_mesh_gives_init_device_mesh_its_names_and_shape(sizes, names, shape):
    """Accelerate's ``_get_mesh()``: (names, shape) in mesh order, ``()`` when none is active."""
    mesh = ParallelismConfig(**sizes)._get_mesh()
    assert mesh == (() if names is None else (names, shape))


def test_build_device_mesh_flattens_the_joint_dimensions_on_a_real_group(gloo_group):
    """``build_device_mesh(device_type)`` returns the root mesh and folds ``dp``,
    ``dp_shard_cp`` and ``dp_cp`` (one process: dimensions kept at size 1)."""
    config = ParallelismConfig()
    assert config.build_device_mesh("cpu") is None  # nothing active
    mesh = config.build_device_mesh("cpu", keep=("dp_replicate", "dp_shard", "tp"))
    assert mesh.mesh_dim_names == ("dp_replicate", "dp_shard", "tp") and mesh.shape == (1, 1, 1)
    for flat in ("dp", "dp_shard_cp", "dp_cp"):
        assert config.get_submesh(flat).size() == 1
    assert config.get_submesh(["dp_shard", "tp"]).mesh_dim_names == ("dp_shard", "tp")


def test_an_invalid_cp_comm_strategy_uses_accelerates_words(monkeypatch):
    with pytest.raises(ConfigurationError, match="Invalid cp_comm_strategy: invalid"):
        TorchContextParallelConfig(cp_comm_strategy="invalid")
    monkeypatch.setenv("PARALLELISM_CONFIG_CP_COMM_STRATEGY", "unsupported")
    with pytest.raises(ConfigurationError, match=r"Invalid cp_comm_strategy: unsupported \(from "
                                                 "PARALLELISM_CONFIG_CP_COMM_STRATEGY\)"):
        ParallelismConfig(cp_size=2)
    monkeypatch.setenv("PARALLELISM_CONFIG_CP_COMM_STRATEGY", "alltoall")
    assert ParallelismConfig(cp_size=2).cp_handler.cp_comm_strategy == "alltoall"
