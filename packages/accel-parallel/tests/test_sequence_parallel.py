"""DeepSpeedSequenceParallelConfig: Accelerate's fields, the PARALLELISM_CONFIG_SP_* variables,
validation, ParallelismConfig(sp_handler=...), and the refusal to train with it."""

from __future__ import annotations

import pytest
from accel_parallel import DeepSpeedSequenceParallelConfig, ParallelismConfig
from accel_parallel.mesh.sequence_parallel import check_sequence_parallel_runtime
from accel_parallel.mesh.strategy import resolve_parallelism
from accel_state import ConfigurationError

_VARS = ("SP_SIZE", "SP_BACKEND", "SP_SEQ_LENGTH", "SP_SEQ_LENGTH_IS_VARIABLE",
         "SP_ATTN_IMPLEMENTATION", "DP_REPLICATE_SIZE", "DP_SHARD_SIZE", "TP_SIZE", "CP_SIZE")


@pytest.fixture(autouse=True)
def _no_parallelism_env(monkeypatch):
    for name in _VARS:
        monkeypatch.delenv(f"PARALLELISM_CONFIG_{name}", raising=False)
        monkeypatch.delenv(f"ACCEL_PARALLELISM_CONFIG_{name}", raising=False)


def test_defaults_and_the_fields_accelerate_documents():
    config = DeepSpeedSequenceParallelConfig()
    assert (config.sp_seq_length, config.sp_seq_length_is_variable,
            config.sp_attn_implementation) == (None, True, None)
    config = DeepSpeedSequenceParallelConfig(sp_seq_length=256, sp_seq_length_is_variable=False,
                                             sp_attn_implementation="sdpa")
    assert (config.sp_seq_length, config.sp_seq_length_is_variable,
            config.sp_attn_implementation) == (256, False, "sdpa")
    for name in ("flash_attention_2", "flash_attention_3", "kernels-community/flash-attn2"):
        assert DeepSpeedSequenceParallelConfig(sp_attn_implementation=name) \
            .sp_attn_implementation == name


def test_fields_left_as_none_come_from_accelerates_variables(monkeypatch):
    monkeypatch.setenv("PARALLELISM_CONFIG_SP_SEQ_LENGTH", "512")
    monkeypatch.setenv("PARALLELISM_CONFIG_SP_SEQ_LENGTH_IS_VARIABLE", "false")
    monkeypatch.setenv("PARALLELISM_CONFIG_SP_ATTN_IMPLEMENTATION", "flash_attention_2")
    config = DeepSpeedSequenceParallelConfig()
    assert (config.sp_seq_length, config.sp_seq_length_is_variable,
            config.sp_attn_implementation) == (512, False, "flash_attention_2")
    # an argument wins over the environment
    assert DeepSpeedSequenceParallelConfig(sp_attn_implementation="sdpa",
                                           sp_seq_length_is_variable=True) \
        .sp_attn_implementation == "sdpa"
    monkeypatch.setenv("ACCEL_PARALLELISM_CONFIG_SP_SEQ_LENGTH", "lots")
    with pytest.raises(ConfigurationError,
                       match=r"ACCEL_PARALLELISM_CONFIG_SP_SEQ_LENGTH \(env\)='lots'"):
        DeepSpeedSequenceParallelConfig()
    monkeypatch.setenv("ACCEL_PARALLELISM_CONFIG_SP_SEQ_LENGTH", "64")
    monkeypatch.setenv("PARALLELISM_CONFIG_SP_ATTN_IMPLEMENTATION", "eager")
    with pytest.raises(ConfigurationError, match=r"SP_ATTN_IMPLEMENTATION \(env\)='eager'"):
        DeepSpeedSequenceParallelConfig()
    monkeypatch.setenv("PARALLELISM_CONFIG_SP_ATTN_IMPLEMENTATION", "sdpa")
    monkeypatch.setenv("PARALLELISM_CONFIG_SP_SEQ_LENGTH_IS_VARIABLE", "sometimes")
    with pytest.raises(ConfigurationError, match="SP_SEQ_LENGTH_IS_VARIABLE='sometimes'"):
        DeepSpeedSequenceParallelConfig()


@pytest.mark.parametrize("kwargs, message", [
    ({"sp_seq_length": 0}, r"sp_seq_length=0 must be a whole number of tokens >= 1"),
    ({"sp_seq_length": 12.5}, r"sp_seq_length=12.5"),
    ({"sp_seq_length": True}, r"sp_seq_length=True"),
    ({"sp_seq_length_is_variable": "yes"}, r"sp_seq_length_is_variable='yes'\) must be True "
                                           r"or False"),
    ({"sp_seq_length_is_variable": False}, r"needs sp_seq_length"),
    ({"sp_attn_implementation": "eager"}, r"'eager' is not supported: Ulysses attends by "
                                          r"position_ids"),
    ({"sp_attn_implementation": "flex_attention"}, r"'flex_attention' is not supported"),
    ({"sp_attn_implementation": "paged"}, r"^Invalid sp_attn_implementation: .*'paged' is not "
                                          r"known: use one of sdpa, "
                                          r"flash_attention_2, flash_attention_3"),
    ({"sp_attn_implementation": "org/my-kernel"}, r"'org/my-kernel' is not known"),
    ({"sp_attn_implementation": 2}, r"sp_attn_implementation=2 must be a string"),
])
def test_bad_values_are_refused_with_the_value_named(kwargs, message):
    with pytest.raises(ConfigurationError, match=message):
        DeepSpeedSequenceParallelConfig(**kwargs)


def test_parallelism_config_takes_it_as_the_sp_handler():
    handler = DeepSpeedSequenceParallelConfig(sp_seq_length=256, sp_attn_implementation="sdpa")
    config = ParallelismConfig(sp_backend="deepspeed", sp_size=4, sp_handler=handler)
    assert config.sp_handler is handler and config.sp_enabled
    assert config.total_size == 4 and config.non_data_parallel_size == 4
    assert config.to_json()["sp_handler"] == {"sp_seq_length": 256,
                                              "sp_seq_length_is_variable": True,
                                              "sp_attn_implementation": "sdpa",
                                              "sp_attention_modules": None}
    # a default handler (from the environment) when sp_size > 1, none when it is 1
    assert isinstance(ParallelismConfig(sp_size=2).sp_handler, DeepSpeedSequenceParallelConfig)
    assert ParallelismConfig().sp_handler is None
    with pytest.raises(ConfigurationError, match=r"sp_handler=\{.*\}\) must be a "
                                                 r"DeepSpeedSequenceParallelConfig"):
        ParallelismConfig(sp_size=2, sp_handler={"sp_seq_length": 8})
    with pytest.raises(ConfigurationError, match=r"sp_seq_length=10\) does not split over "
                                                 r"sp_size=4.*multiple of 4"):
        ParallelismConfig(sp_size=4, sp_handler=DeepSpeedSequenceParallelConfig(sp_seq_length=10))


def test_sp_settings_from_the_environment_reach_the_default_handler(monkeypatch):
    monkeypatch.setenv("PARALLELISM_CONFIG_SP_SIZE", "2")
    monkeypatch.setenv("PARALLELISM_CONFIG_SP_BACKEND", "deepspeed")
    monkeypatch.setenv("PARALLELISM_CONFIG_SP_ATTN_IMPLEMENTATION", "flash_attention_3")
    monkeypatch.setenv("PARALLELISM_CONFIG_SP_SEQ_LENGTH", "7")
    with pytest.raises(ConfigurationError, match=r"sp_seq_length=7\) does not split"):
        ParallelismConfig()
    monkeypatch.setenv("PARALLELISM_CONFIG_SP_SEQ_LENGTH", "8")
    config = ParallelismConfig()
    assert (config.sp_size, config.sp_handler.sp_attn_implementation,
            config.sp_handler.sp_seq_length) == (2, "flash_attention_3", 8)


def test_sp_is_refused_only_under_deepspeed_naming_what_to_use():
    check_sequence_parallel_runtime(ParallelismConfig(), "deepspeed")  # sp_size 1: nothing
    config = ParallelismConfig(sp_size=2, sp_handler=DeepSpeedSequenceParallelConfig())
    check_sequence_parallel_runtime(config)  # the N-D strategy runs it
    assert resolve_parallelism(config, None, 2) is config
    with pytest.raises(ConfigurationError) as caught:
        check_sequence_parallel_runtime(config, "deepspeed")
    message = str(caught.value)
    assert "sp_size=2, sp_backend='deepspeed'" in message and "DeepSpeed plugin" in message
    assert "Drop the DeepSpeed plugin" in message and "dp_shard_size" in message


@pytest.mark.parametrize("backend", ["deepspeed", "torch", "accelerate"])
def test_every_backend_name_gets_a_handler_and_shards_with_fsdp2(backend):
    config = ParallelismConfig(sp_size=2, sp_backend=backend)
    assert isinstance(config.sp_handler, DeepSpeedSequenceParallelConfig)
    assert config.fsdp_enabled and config.dp_shard_cp_dim_names == ["sp"]
    with pytest.raises(ConfigurationError, match=r"sp_backend='ring' is not valid; use one of "
                                                 r"deepspeed, torch, accelerate"):
        ParallelismConfig(sp_size=2, sp_backend="ring")


def test_tp_and_sp_compose_on_one_mesh_tp_first(monkeypatch):
    """TP x SP needs tp_size * sp_size processes (4 at the least: no 2-process run), so the
    composition is checked here: ``tp`` is the innermost mesh dimension (a TP group is
    consecutive ranks) after ``sp``; FSDP2 shards over ``sp`` (``dp_shard_cp``) and not over
    ``tp``; each model gets TP over the ``tp`` submesh first, then Ulysses over the mesh (so
    the core attention sees this TP rank's heads, which the exchange splits over ``sp``)."""
    from types import SimpleNamespace

    import torch
    from accel_parallel.mesh import strategy as nd
    from accel_parallel.mesh import tensor_parallel
    from accel_parallel.mesh.device_mesh import mesh_dims
    from accel_parallel.mesh.strategy import DataParallelStep, MeshStrategy

    config = ParallelismConfig(tp_size=2, sp_size=2)
    assert mesh_dims(config) == [("sp", 2), ("tp", 2)]
    assert config.total_size == config.non_data_parallel_size == 4
    assert config.dp_shard_cp_dim_names == ["sp"] and config.fsdp_enabled
    assert DataParallelStep.for_mesh(config, sharding=config.fsdp_enabled) is \
        DataParallelStep.FSDP
    steps: list[tuple[str, object]] = []
    monkeypatch.setattr(tensor_parallel, "apply_tensor_parallel",
                        lambda model, mesh, **options: steps.append(("tp", mesh)))
    monkeypatch.setattr(nd, "apply_sequence_parallel",
                        lambda model, mesh, parallelism: steps.append(("sp", mesh)))
    mesh = SimpleNamespace(submesh=lambda name: f"submesh:{name}")
    MeshStrategy.parallelize(SimpleNamespace(parallelism=config, _mesh=mesh),
                             torch.nn.Linear(2, 2))
    assert steps == [("tp", "submesh:tp"), ("sp", mesh)]
