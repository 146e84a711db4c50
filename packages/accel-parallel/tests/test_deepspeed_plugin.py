"""DeepSpeedPlugin: the three spellings, environment variables, "auto" filling, conflicts and
every bad value; the strategy's errors before DeepSpeed is imported; the missing-dependency
error. No processes, and DeepSpeed itself is only needed by the tests that import it."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from accel_parallel import (
    STRATEGIES,
    DeepSpeedPlugin,
    DeepSpeedStrategy,
    DummyOptim,
    DummyScheduler,
    HfDeepSpeedConfig,
    StrategyConfig,
    select_strategy,
)
from accel_parallel.deepspeed import runtime as deepspeed_runtime
from accel_parallel.deepspeed.config import (
    apply_precision,
    fill_auto,
    hidden_size_of,
    zero_init_config,
)
from accel_precision import NoPrecision
from accel_state import ConfigurationError, MissingDependencyError

SAME = {"zero_stage": 2, "gradient_accumulation_steps": 4, "gradient_clipping": 1.0}


@pytest.fixture(scope="module")
def ds_group():
    """One one-process gloo group for every engine test of this module: DeepSpeed caches
    the groups it sees, so the group must outlive all its engines (as in a real run)."""
    pytest.importorskip("deepspeed")
    import socket

    import torch.distributed as dist

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dist.init_process_group("gloo", rank=0, world_size=1, init_method=f"tcp://127.0.0.1:{port}")
    yield
    dist.destroy_process_group()


# -- the three spellings -----------------------------------------------------------------------
def test_three_spellings_give_the_same_config(tmp_path):
    from_fields = DeepSpeedPlugin(**SAME, offload_optimizer_device="cpu")
    from_dict = DeepSpeedPlugin.from_dict({**SAME, "offload_optimizer": True})
    json_config = {
        "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
        "gradient_accumulation_steps": 4, "gradient_clipping": 1.0,
        "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
        "bf16": {"enabled": "auto"}, "fp16": {"enabled": "auto"}}
    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps(json_config))
    from_path = DeepSpeedPlugin(hf_ds_config=str(path))
    from_json_dict = DeepSpeedPlugin(hf_ds_config=json_config)
    assert from_fields.deepspeed_config == from_dict.deepspeed_config
    assert from_fields.deepspeed_config == from_path.deepspeed_config
    assert from_fields.deepspeed_config == from_json_dict.deepspeed_config
    assert from_path.zero_stage == 2 and from_path.hf_ds_config.get_value(
        "zero_optimization.offload_optimizer.device") == "cpu"


def test_default_plugin_config():
    config = DeepSpeedPlugin().deepspeed_config
    assert config["zero_optimization"] == {"stage": 2}
    assert config["gradient_accumulation_steps"] == "auto"
    assert config["gradient_clipping"] == "auto"
    assert config["train_micro_batch_size_per_gpu"] == "auto"


def test_plain_dict_offload_forms():
    assert DeepSpeedPlugin.from_dict({"offload_optimizer": False}).deepspeed_config[
        "zero_optimization"] == {"stage": 2}
    plugin = DeepSpeedPlugin.from_dict({"zero_stage": 3, "offload_param": "cpu",
                                        "offload_optimizer": {"device": "cpu",
                                                              "pin_memory": True}})
    zero = plugin.deepspeed_config["zero_optimization"]
    assert zero["offload_optimizer"] == {"device": "cpu", "pin_memory": True}
    assert zero["offload_param"] == {"device": "cpu"}
    assert zero["stage3_gather_16bit_weights_on_model_save"] is False
    nvme = DeepSpeedPlugin.from_dict({"offload_optimizer": {"device": "nvme",
                                                            "nvme_path": "/tmp/x"}})
    assert nvme.deepspeed_config["zero_optimization"]["offload_optimizer"] == {
        "device": "nvme", "nvme_path": "/tmp/x"}


def test_fields_fill_the_json_autos_and_missing_keys():
    plugin = DeepSpeedPlugin(hf_ds_config={"gradient_accumulation_steps": "auto",
                                           "zero_optimization": {"stage": "auto"}},
                             zero_stage=1, gradient_accumulation_steps=8, gradient_clipping=0.3)
    config = plugin.deepspeed_config
    assert (config["zero_optimization"]["stage"], config["gradient_accumulation_steps"],
            config["gradient_clipping"]) == (1, 8, 0.3)
    assert plugin.zero_stage == 1


# -- environment -------------------------------------------------------------------------------
def test_environment_fills_unset_fields(monkeypatch):
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", "3")
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_DEVICE", "cpu")
    monkeypatch.setenv("ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "2")
    monkeypatch.setenv("ACCELERATE_GRADIENT_CLIPPING", "0.5")
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO3_INIT", "true")
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO3_SAVE_16BIT_MODEL", "true")
    plugin = DeepSpeedPlugin()
    config = plugin.deepspeed_config
    assert config["zero_optimization"]["stage"] == 3
    assert config["zero_optimization"]["offload_param"] == {"device": "cpu"}
    assert config["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] is True
    assert (config["gradient_accumulation_steps"], config["gradient_clipping"]) == (2, 0.5)
    assert plugin.zero3_init_flag is True and plugin.zero3_init_flag_enabled
    assert DeepSpeedPlugin(zero_stage=3, gradient_accumulation_steps=5).deepspeed_config[
        "gradient_accumulation_steps"] == 5  # an argument wins over the variable


def test_environment_offload_nvme_and_moe_variables(monkeypatch):
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", "3")
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE", "nvme")
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_NVME_PATH", "/nvme/opt")
    monkeypatch.setenv("ACCEL_DEEPSPEED_OFFLOAD_PARAM_DEVICE", "nvme")  # accel's own spelling
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_OFFLOAD_PARAM_NVME_PATH", "/nvme/param")
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_MOE_LAYER_CLS_NAMES", "Expert,Router")
    plugin = DeepSpeedPlugin()
    zero = plugin.deepspeed_config["zero_optimization"]
    assert zero["offload_optimizer"] == {"device": "nvme", "nvme_path": "/nvme/opt"}
    assert zero["offload_param"] == {"device": "nvme", "nvme_path": "/nvme/param"}
    assert plugin.transformer_moe_cls_names == "Expert,Router"


def test_environment_next_to_a_json_fills_its_autos_and_conflicts_name_the_variable(
        monkeypatch, tmp_path):
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"gradient_accumulation_steps": "auto",
                                "zero_optimization": {"stage": 1,
                                                      "offload_optimizer": {"device": "cpu"}}}))
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_CONFIG_FILE", str(path))
    # what `accel launch --deepspeed_config_file ds.json --gradient_accumulation_steps 4` sets
    monkeypatch.setenv("ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "4")
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", "1")
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE", "cpu")
    plugin = DeepSpeedPlugin()
    assert plugin.zero_stage == 1 and plugin.get_value("gradient_accumulation_steps") == 4
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", "3")  # never a silent winner
    with pytest.raises(ConfigurationError, match=r"environment variable "
                       r"ACCELERATE_DEEPSPEED_ZERO_STAGE='3' \(DeepSpeedPlugin.zero_stage\) but "
                       r"the DeepSpeed JSON \(hf_ds_config\) says stage=1"):
        DeepSpeedPlugin()
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", "1")
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE", "none")
    with pytest.raises(ConfigurationError, match=r"OFFLOAD_OPTIMIZER_DEVICE='none'.*device='cpu'"):
        DeepSpeedPlugin()
    monkeypatch.delenv("ACCELERATE_DEEPSPEED_OFFLOAD_OPTIMIZER_DEVICE")
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO3_INIT", "true")
    with pytest.warns(UserWarning, match=r"ACCELERATE_DEEPSPEED_ZERO3_INIT='true'.*only "
                      r"applies to ZeRO stage 3 \(the config has stage 1\)"):
        assert DeepSpeedPlugin().zero3_init_flag is False
    monkeypatch.delenv("ACCELERATE_DEEPSPEED_CONFIG_FILE")
    monkeypatch.delenv("ACCELERATE_DEEPSPEED_ZERO3_INIT")
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", "three")
    with pytest.raises(ConfigurationError, match="ACCELERATE_DEEPSPEED_ZERO_STAGE='three'"):
        DeepSpeedPlugin()


def test_nvme_path_next_to_a_json_fills_or_conflicts():
    json_config = {"zero_optimization": {"stage": 3, "offload_param": {
        "device": "nvme", "nvme_path": "auto"}}}
    plugin = DeepSpeedPlugin(hf_ds_config=json_config, offload_param_nvme_path="/fast")
    assert plugin.get_value("zero_optimization.offload_param.nvme_path") == "/fast"
    json_config["zero_optimization"]["offload_param"]["nvme_path"] = "/slow"
    with pytest.raises(ConfigurationError, match=r"offload_param_nvme_path='/fast'.*"
                       r"nvme_path='/slow'"):
        DeepSpeedPlugin(hf_ds_config=json_config, offload_param_nvme_path="/fast")


# -- bad values --------------------------------------------------------------------------------
@pytest.mark.parametrize(("kwargs", "match"), [
    ({"zero_stage": 5}, r"zero_stage=5\) must be 0, 1, 2 or 3"),
    ({"zero_stage": True}, r"zero_stage=True"),
    ({"gradient_accumulation_steps": 0}, r"gradient_accumulation_steps=0"),
    ({"gradient_clipping": -1.0}, r"gradient_clipping=-1.0"),
    ({"offload_optimizer_device": "gpu"}, r"offload_optimizer_device='gpu'.*none, cpu, nvme"),
    ({"offload_param_device": "nvme", "zero_stage": 3}, r"offload_param_nvme_path"),
    ({"offload_param_device": "cpu", "zero_stage": 2}, r"needs zero_stage=3"),
    ({"enable_msamp": True}, r"MS-AMP"),
    ({"msamp_opt_level": "O1"}, r"MS-AMP"),
    ({"hf_ds_config": 42}, r"hf_ds_config=42"),
    ({"hf_ds_config": "/no/such/ds.json"}, r"no such file"),
    ({"hf_ds_config": {"zero_optimization": {"stage": 7}}}, r"stage=7"),
    ({"hf_ds_config": {"zero_optimization": {"offload_param": {"device": "disk"}}}},
     r"offload_param.device='disk'"),
    ({"hf_ds_config": {"zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}}},
     r"offload_param.device='cpu' needs ZeRO stage 3 \(the config has stage 2\)"),
])
def test_bad_values_are_refused(kwargs, match):
    with pytest.raises(ConfigurationError, match=match):
        DeepSpeedPlugin(**kwargs)


def test_zero3_init_flag_below_stage_3_is_turned_off_with_a_warning():
    with pytest.warns(UserWarning, match=r"zero3_init_flag=True\) only applies to ZeRO stage 3"):
        plugin = DeepSpeedPlugin(zero3_init_flag=True, zero_stage=2)
    assert plugin.zero3_init_flag is False  # as Accelerate does: the config still runs


def test_bad_json_files(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigurationError, match="not valid JSON"):
        DeepSpeedPlugin(hf_ds_config=str(bad))
    bad.write_text("[1, 2]")
    with pytest.raises(ConfigurationError, match="JSON object"):
        DeepSpeedPlugin(hf_ds_config=str(bad))


@pytest.mark.parametrize(("options", "match"), [
    ({"zero_stag": 2}, r"unknown key 'zero_stag'"),
    ({"offload_optimizer": 3}, r"give a bool, a device name"),
    ({"offload_optimizer": "cpu", "offload_optimizer_device": "cpu"}, r"both 'offload_optimizer'"),
    ({"offload_optimizer": "tape"}, r"offload_optimizer_device='tape'"),
])
def test_bad_plain_dicts_are_refused(options, match):
    with pytest.raises(ConfigurationError, match=match):
        DeepSpeedPlugin.from_dict(options)


def test_field_and_json_conflict_names_both():
    with pytest.raises(ConfigurationError, match=r"zero_stage=3.*says stage=2"):
        DeepSpeedPlugin(hf_ds_config={"zero_optimization": {"stage": 2}}, zero_stage=3)
    with pytest.raises(ConfigurationError,
                       match=r"gradient_accumulation_steps=2.*gradient_accumulation_steps=4"):
        DeepSpeedPlugin(hf_ds_config={"gradient_accumulation_steps": 4},
                        gradient_accumulation_steps=2)
    with pytest.raises(ConfigurationError, match=r"offload_optimizer_device='none'.*device='cpu'"):
        DeepSpeedPlugin(hf_ds_config={"zero_optimization": {
            "offload_optimizer": {"device": "cpu"}}}, offload_optimizer_device="none")


# -- mixed precision ---------------------------------------------------------------------------
def test_precision_fills_auto_and_conflicts_name_both():
    config = {"bf16": {"enabled": "auto"}, "fp16": {"enabled": "auto"}}
    apply_precision(config, "bf16")
    assert config == {"bf16": {"enabled": True}, "fp16": {"enabled": False}}
    with pytest.raises(ConfigurationError, match=r"bf16.enabled=False.*mixed_precision.*'bf16'"):
        apply_precision({"bf16": {"enabled": False}}, "bf16")
    with pytest.raises(ConfigurationError, match=r"fp16.enabled=True.*'bf16'"):
        apply_precision({"fp16": {"enabled": True}}, "bf16")
    kept = {"bf16": {"enabled": True}}
    apply_precision(kept, "no")  # a JSON may enable bf16 by itself
    assert kept["bf16"]["enabled"] is True
    with pytest.raises(ConfigurationError, match="both bf16 and fp16"):
        apply_precision({"bf16": {"enabled": True}, "fp16": {"enabled": True}}, "no")
    with pytest.raises(ConfigurationError, match="mixed_precision='fp8'"):
        apply_precision({}, "fp8")
    with pytest.raises(ConfigurationError, match="must be an object"):
        apply_precision({"bf16": True}, "bf16")
    plugin = DeepSpeedPlugin()
    plugin.set_mixed_precision("bf16")
    assert plugin.get_value("bf16.enabled") is True


# -- "auto" filling ----------------------------------------------------------------------------
def test_fill_auto_batch_accumulation_clipping_buckets():
    config = DeepSpeedPlugin(zero_stage=3).deepspeed_config
    config["zero_optimization"].update(reduce_bucket_size="auto",
                                       stage3_prefetch_bucket_size="auto",
                                       stage3_param_persistence_threshold="auto")
    apply_precision(config, "no")
    filled = fill_auto(config, micro_batch=8, dp_size=2, accumulation=3, hidden_size=64)
    assert (filled["train_micro_batch_size_per_gpu"], filled["gradient_accumulation_steps"],
            filled["train_batch_size"], filled["gradient_clipping"]) == (8, 3, 48, 0.0)
    zero = filled["zero_optimization"]
    assert (zero["reduce_bucket_size"], zero["stage3_prefetch_bucket_size"],
            zero["stage3_param_persistence_threshold"]) == (4096, int(0.9 * 4096), 640)
    assert config["train_batch_size"] == "auto"  # the plugin's config is left as it was
    without_hidden = fill_auto(config, micro_batch=8, dp_size=2, accumulation=3)
    assert "reduce_bucket_size" not in without_hidden["zero_optimization"]


def test_fill_auto_from_a_set_train_batch_size_without_loader():
    filled = fill_auto({"train_batch_size": 32, "train_micro_batch_size_per_gpu": "auto"},
                       micro_batch=None, dp_size=2, accumulation=2)
    assert filled["train_micro_batch_size_per_gpu"] == 8


@pytest.mark.parametrize(("config", "kwargs", "match"), [
    ({"train_micro_batch_size_per_gpu": 4}, {"micro_batch": 8},
     r"train_micro_batch_size_per_gpu=4 but the prepared data loader's batch size .* 8"),
    ({"train_batch_size": 10}, {"micro_batch": 8},
     r"train_batch_size=10 but micro batch 8 x accumulation 1 x 2 .* 16"),
    ({"gradient_accumulation_steps": 4}, {"micro_batch": 8},
     r"gradient_accumulation_steps=4 but the Accelerator's gradient_accumulation_steps is 1"),
    ({"train_micro_batch_size_per_gpu": "auto"}, {"micro_batch": None}, r"no data loader"),
    ({"wall_clock_breakdown": "auto"}, {"micro_batch": 2}, r"wall_clock_breakdown.*no source"),
])
def test_fill_auto_conflicts_name_both_sources(config, kwargs, match):
    with pytest.raises(ConfigurationError, match=match):
        fill_auto(config, dp_size=2, accumulation=1, **kwargs)


def test_fill_auto_optimizer_and_scheduler_from_the_dummies():
    model = torch.nn.Linear(2, 2)
    optimizer = DummyOptim(model.parameters(), lr=0.1, weight_decay=0.2, betas=[0.8, 0.9])
    scheduler = DummyScheduler(optimizer, total_num_steps=100, warmup_num_steps=10)
    config = {"optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto",
                                                        "weight_decay": "auto", "eps": 1e-8}},
              "scheduler": {"type": "WarmupDecayLR", "params": {
                  "warmup_min_lr": "auto", "warmup_max_lr": "auto", "warmup_num_steps": "auto",
                  "total_num_steps": "auto"}}}
    filled = fill_auto(config, micro_batch=2, dp_size=1, accumulation=1,
                       optimizer_params=optimizer.config_values(),
                       scheduler_params=scheduler.config_values())
    assert filled["optimizer"]["params"] == {"lr": 0.1, "betas": [0.8, 0.9],
                                             "weight_decay": 0.2, "eps": 1e-8}
    assert filled["scheduler"]["params"] == {"warmup_min_lr": 0.0, "warmup_max_lr": 0.1,
                                             "warmup_num_steps": 10, "total_num_steps": 100}
    with pytest.raises(ConfigurationError, match=r"optimizer.params.momentum is \"auto\""):
        fill_auto({"optimizer": {"params": {"momentum": "auto"}}}, micro_batch=2, dp_size=1,
                  accumulation=1, optimizer_params=optimizer.config_values())


def test_hidden_size_and_helpers():
    class Config:
        hidden_sizes = [32, 128, 64]

    model = torch.nn.Linear(2, 2)
    assert hidden_size_of(model) is None
    model.config = Config()
    assert hidden_size_of(model) == 128
    model.hidden_size = 48
    assert hidden_size_of(model) == 48
    plugin = DeepSpeedPlugin(zero_stage=3, offload_param_device="cpu")
    ds = plugin.hf_ds_config
    assert isinstance(ds, HfDeepSpeedConfig) and ds.is_zero3() and ds.is_offload()
    assert ds.get_value("zero_optimization.nothing.here", 5) == 5
    assert plugin.is_auto("train_batch_size")
    mismatches: list[str] = []
    plugin.fill_match("train_batch_size", mismatches, train_batch_size=16)
    plugin.fill_match("zero_optimization.stage", mismatches, stage=2)
    assert plugin.get_value("train_batch_size") == 16
    assert mismatches == ["- ds zero_optimization.stage=3 vs accel stage=2"]
    assert zero_init_config(plugin.deepspeed_config)["zero_optimization"]["stage"] == 3


def test_select_among_named_plugins():
    first, second = DeepSpeedPlugin(zero_stage=1), DeepSpeedPlugin(zero_stage=3)
    family = {"a": first, "b": second}
    for plugin in family.values():
        plugin._family = family
    first.select()
    assert first.selected and not second.selected
    second.select()
    assert second.selected and not first.selected


def test_zero3_init_context_is_a_no_op_without_the_flag():
    with DeepSpeedPlugin(zero_stage=2).zero3_init_context_manager():
        model = torch.nn.Linear(2, 2)
    assert model.weight.numel() == 4


# -- the strategy, before DeepSpeed is imported ------------------------------------------------
def test_missing_deepspeed_names_the_extra(state, monkeypatch):
    monkeypatch.setattr(deepspeed_runtime, "is_deepspeed_available", lambda: False)
    config = StrategyConfig(state=state, precision=NoPrecision(device=state.device),
                            plugins={"deepspeed": {"default": DeepSpeedPlugin()}})
    with pytest.raises(MissingDependencyError, match=r'pip install "accel\[deepspeed\]"'):
        select_strategy(config)
    with pytest.raises(ImportError, match="deepspeed"):
        deepspeed_runtime.import_deepspeed()


def test_deepspeed_is_registered_above_fsdp(state):
    assert STRATEGIES.get("deepspeed") is DeepSpeedStrategy
    assert DeepSpeedStrategy.priority > STRATEGIES.get("fsdp").priority
    assert DeepSpeedStrategy.claims(StrategyConfig(
        state=state, precision=NoPrecision(device=state.device),
        plugins={"deepspeed": {"default": DeepSpeedPlugin()}}))


def test_deepspeed_with_tensor_parallelism_is_refused(state):
    config = StrategyConfig(state=state, precision=NoPrecision(device=state.device),
                            plugins={"deepspeed": {"default": DeepSpeedPlugin()},
                                     "parallelism_config": object()})
    with pytest.raises(ConfigurationError, match="cannot be combined with parallelism_config"):
        select_strategy(config)


def test_fp16_on_cpu_is_refused(state):
    plugin = DeepSpeedPlugin(hf_ds_config={"fp16": {"enabled": True}})
    with pytest.raises(ConfigurationError, match="fp16 does not run on CPU"):
        DeepSpeedStrategy(state, plugins={"default": plugin})


def _strategy(state, config=None):
    plugin = DeepSpeedPlugin(hf_ds_config=config) if config is not None else DeepSpeedPlugin()
    return DeepSpeedStrategy(state, plugins={"default": plugin})


def _request(**kinds):
    from accel_parallel import PrepareRequest

    return PrepareRequest(**kinds)


def test_prepare_errors_before_deepspeed_is_needed(state):
    model = torch.nn.Linear(2, 2)
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    with_optimizer = {"optimizer": {"type": "AdamW", "params": {"lr": 0.1}}}
    cases = [
        (None, _request(optimizers=[sgd]), r"pass the model together with its optimizer"),
        (None, _request(models=[model, torch.nn.Linear(2, 2)]), r"one model, at most one"),
        (with_optimizer, _request(models=[model], optimizers=[sgd]),
         r"defines an optimizer \('AdamW'\) and prepare\(\) was also given SGD"),
        (None, _request(models=[model], optimizers=[DummyOptim(model.parameters())]),
         r"DummyOptim but the DeepSpeed config has no 'optimizer'"),
        (with_optimizer, _request(models=[model]), r"pass DummyOptim"),
        ({"scheduler": {"type": "WarmupLR"}}, _request(
            models=[model], optimizers=[sgd],
            schedulers=[torch.optim.lr_scheduler.StepLR(sgd, 1)]),
         r"defines a scheduler \('WarmupLR'\).*StepLR"),
        (None, _request(models=[model], optimizers=[sgd], schedulers=[DummyScheduler(sgd)]),
         r"DummyScheduler but the DeepSpeed config has no 'scheduler'"),
        (None, _request(models=[model], optimizers=[sgd]), r"no data loader was prepared"),
    ]
    for config, request, match in cases:
        with pytest.raises(ConfigurationError, match=match):
            _strategy(state, config).prepare(request)


def test_step_hooks_that_need_no_engine(state):
    strategy = _strategy(state)
    assert strategy.scaler is None and strategy.distributed_type.value == "DEEPSPEED"
    with pytest.raises(ConfigurationError, match="cannot clip gradients by value"):
        strategy.clip_grad_value_([], 1.0)
    with pytest.raises(ConfigurationError, match="No DeepSpeed engine yet"):
        strategy.backward(torch.ones(()))
    model = torch.nn.Linear(2, 2)
    assert strategy.unwrap_model(model) is model
    assert strategy.checkpoint_format([model]) == "replicated"  # not an engine's


# -- with DeepSpeed: one process ---------------------------------------------------------------
def test_one_process_engine_trains_and_refuses_other_clip_norms(state, ds_group, monkeypatch,
                                                                tmp_path):
    monkeypatch.setenv("ACCEL_DEEPSPEED_SHM_COMM", "0")
    monkeypatch.setenv("LOCAL_RANK", "0")  # removed again afterwards
    from accel_state import GradientState

    GradientState._reset_state()
    GradientState()
    strategy = _strategy(state, {"zero_optimization": {"stage": 2}, "gradient_clipping": 0.5,
                                 "train_micro_batch_size_per_gpu": "auto"})
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = torch.utils.data.DataLoader(torch.randn(8, 4), batch_size=2)
    prepared = strategy.prepare(_request(models=[model], optimizers=[optimizer],
                                         dataloaders=[loader]))
    engine = prepared.models[0]
    assert strategy.configs["default"]["train_micro_batch_size_per_gpu"] == 2
    before = model.weight.detach().clone()
    strategy.backward(engine(next(iter(loader))).pow(2).mean())
    assert strategy.optimizer_step(prepared.optimizers[0]) is True
    assert not torch.equal(before, model.weight)
    assert strategy.unwrap_model(engine) is model
    assert strategy.clip_grad_norm_(model.parameters(), 0.5) is not None
    with pytest.raises(ConfigurationError, match=r"max_norm=1.0.*gradient_clipping=0.5"):
        strategy.clip_grad_norm_(model.parameters(), 1.0)
    with pytest.raises(ConfigurationError, match="already prepared a model"):
        strategy.prepare(_request(models=[torch.nn.Linear(4, 1)],
                                  optimizers=[torch.optim.SGD(model.parameters(), lr=0.1)]))
    writer = strategy.checkpoint_format([model])
    assert type(writer).__name__ == "DeepSpeedWriter"
    # what the writer refuses, before DeepSpeed writes or reads anything
    stranger = torch.nn.Linear(4, 1)
    with pytest.raises(ConfigurationError, match=r"'other' \(Linear\) was not prepared by "
                       "DeepSpeed"):
        writer.save(tmp_path, {"model": engine, "other": stranger}, 0, 1)
    with pytest.raises(ConfigurationError, match=r"'optimizer' \(SGD\) is not the optimizer of "
                       "a DeepSpeed engine"):
        writer.save(tmp_path, {"model": engine,
                               "optimizer": torch.optim.SGD(stranger.parameters(), lr=0.1)}, 0, 1)
    with pytest.raises(ConfigurationError, match=r"is not the optimizer of a DeepSpeed engine "
                       "saved with it"):
        writer.save(tmp_path, {"optimizer": prepared.optimizers[0]}, 0, 1)
    with pytest.raises(ConfigurationError, match=r"holds no DeepSpeed checkpoint for 'model'"):
        writer.load(tmp_path, {"model": engine}, 0, 1)
    with pytest.raises(ConfigurationError, match="Linear was not prepared by DeepSpeed"):
        writer.full_state_dict(stranger)
    assert not list(tmp_path.iterdir())  # nothing was written
    # ZeRO partitions of 2 processes into this one: refused before DeepSpeed reads a file
    folder = tmp_path / "deepspeed" / "model"
    folder.mkdir(parents=True)
    for name in ("mp_rank_00_model_states.pt", "zero_pp_rank_0_mp_rank_00_optim_states.pt",
                 "zero_pp_rank_1_mp_rank_00_optim_states.pt"):
        (folder / name).write_bytes(b"not read")
    kept = model.weight.detach().clone()
    # accel repartitions ZeRO state itself, but not into an optimizer swapped to NVMe
    engine.zero_nvme_offload_optimizer = lambda: True  # shadows the method, on this engine
    with pytest.raises(ConfigurationError, match=r"partitioned over 2 process\(es\), but this "
                       r"run has 1, and accel cannot repartition it onto this engine: its "
                       r"optimizer state is swapped to NVMe.*--num_processes 2.*"
                       r"accel merge-weights .* --trust_pickles"):
        writer.load(tmp_path, {"model": engine, "optimizer": prepared.optimizers[0]}, 0, 1)
    del engine.zero_nvme_offload_optimizer
    assert torch.equal(model.weight, kept)
    shutil.rmtree(tmp_path / "deepspeed")
    full = writer.full_state_dict(engine)
    assert torch.equal(full["weight"], model.weight.detach())
    assert full["weight"].data_ptr() != model.weight.data_ptr()  # a copy


class _Hostile:
    def __reduce__(self):
        return (print, ("this would run",))


def test_deepspeed_files_are_read_with_an_allow_list(tmp_path):
    pytest.importorskip("deepspeed")
    import pickle

    from accel_parallel.deepspeed.checkpoint import DeepSpeedWriter
    from accel_parallel.deepspeed.unpickle import restricted_load
    from deepspeed.runtime.fp16.loss_scaler import LossScaler
    from deepspeed.runtime.zero.config import ZeroStageEnum

    assert DeepSpeedWriter.unpickles == "restricted"
    good = tmp_path / "good.pt"
    torch.save({"loss_scaler": LossScaler(1.0), "zero_stage": ZeroStageEnum(2),
                "t": torch.ones(2)}, good)
    loaded = restricted_load(good)
    assert loaded["zero_stage"] == 2 and torch.equal(loaded["t"], torch.ones(2))
    bad = tmp_path / "bad.pt"
    torch.save({"x": _Hostile()}, bad)
    with pytest.raises(pickle.UnpicklingError, match="outside the allow-list.*print"):
        restricted_load(bad)


def test_two_named_plugins_drive_two_engines(state, ds_group, monkeypatch):
    """Accelerate's multi-model form (its knowledge-distillation guide): each prepare uses the
    selected plugin; a teacher prepared for evaluation needs no optimizer; backward goes to
    the engine prepared with an optimizer even while the teacher's plugin is selected; with
    two trained engines, to the selected plugin's."""
    monkeypatch.setenv("ACCEL_DEEPSPEED_SHM_COMM", "0")
    monkeypatch.setenv("LOCAL_RANK", "0")
    from accel_state import GradientState

    GradientState._reset_state()
    GradientState()
    student, teacher = DeepSpeedPlugin(zero_stage=2), DeepSpeedPlugin(zero_stage=3)
    other = DeepSpeedPlugin(zero_stage=1)
    family = {"student": student, "teacher": teacher, "other": other}
    for plugin in family.values():
        plugin._family = family
    strategy = DeepSpeedStrategy(state, plugins=family)
    assert strategy.plugin is student
    torch.manual_seed(0)
    loader = torch.utils.data.DataLoader(torch.randn(8, 4), batch_size=2)
    model = torch.nn.Linear(4, 1)
    prepared = strategy.prepare(_request(models=[model], dataloaders=[loader],
                                         optimizers=[torch.optim.SGD(model.parameters(), 0.1)]))
    teacher.select()
    teacher_model = torch.nn.Linear(4, 1)
    strategy.prepare(_request(models=[teacher_model], evaluation_mode=True))
    assert list(strategy.engines) == ["student", "teacher"]
    assert strategy.configs["teacher"]["zero_optimization"]["stage"] == 3
    assert "optimizer" not in strategy.configs["teacher"]
    with pytest.raises(ConfigurationError, match="already prepared a model"):
        strategy.prepare(_request(models=[torch.nn.Linear(4, 1)], evaluation_mode=True))
    # the guide's loop: the teacher stays selected, the loss is the student's
    before = model.weight.detach().clone()
    strategy.backward(prepared.models[0](next(iter(loader))).pow(2).mean())
    assert not torch.equal(before, model.weight)  # the student's engine stepped
    # a second trained model: backward follows the selected plugin
    other.select()
    second = torch.nn.Linear(4, 1)
    other_prepared = strategy.prepare(_request(
        models=[second], optimizers=[torch.optim.SGD(second.parameters(), 0.1)]))
    before = second.weight.detach().clone()
    strategy.backward(other_prepared.models[0](next(iter(loader))).pow(2).mean())
    assert not torch.equal(before, second.weight)
    teacher.select()
    with pytest.raises(ConfigurationError, match=r"Several DeepSpeed engines train \(student, "
                       r"other\) and the selected plugin 'teacher' is none of them"):
        strategy.backward(prepared.models[0](next(iter(loader))).pow(2).mean())


def test_offload_turns_torch_adam_and_adagrad_into_deepspeed_cpu_optimizers(monkeypatch):
    """As Accelerate does; the real CPU optimizers compile a C++ op (minutes: the slow
    test), their constructor arguments are the contract checked here."""
    pytest.importorskip("deepspeed")
    import deepspeed.ops.adagrad as ds_adagrad
    import deepspeed.ops.adam as ds_adam
    from accel_parallel.deepspeed.strategy import _cpu_optimizer_for_offload

    class Fake:
        def __init__(self, params, **kwargs):
            self.params, self.kwargs = params, kwargs

    monkeypatch.setattr(ds_adam, "DeepSpeedCPUAdam", type("DeepSpeedCPUAdam", (Fake,), {}))
    monkeypatch.setattr(ds_adagrad, "DeepSpeedCPUAdagrad", type("DeepSpeedCPUAdagrad", (Fake,), {}))
    params = [torch.nn.Parameter(torch.ones(2))]
    offload = {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}
    adamw = torch.optim.AdamW(params, lr=0.01, weight_decay=0.1)
    mapped = _cpu_optimizer_for_offload(adamw, offload)
    assert type(mapped).__name__ == "DeepSpeedCPUAdam"
    assert mapped.params is adamw.param_groups and mapped.kwargs["adamw_mode"] is True
    assert (mapped.kwargs["lr"], mapped.kwargs["weight_decay"]) == (0.01, 0.1)
    adagrad = torch.optim.Adagrad(params, lr=0.5)
    assert type(_cpu_optimizer_for_offload(adagrad, offload)).__name__ == "DeepSpeedCPUAdagrad"
    sgd = torch.optim.SGD(params, lr=0.1)
    assert _cpu_optimizer_for_offload(sgd, offload) is sgd  # DeepSpeed names what it accepts
    opted_out = {**offload, "zero_force_ds_cpu_optimizer": False}
    assert _cpu_optimizer_for_offload(adamw, opted_out) is adamw
    assert _cpu_optimizer_for_offload(adamw, {"zero_optimization": {"stage": 2}}) is adamw


def test_moe_classes_become_zero3_leaf_modules():
    pytest.importorskip("deepspeed")

    class Expert(torch.nn.Linear):
        pass

    model = torch.nn.Sequential(Expert(2, 2), torch.nn.Linear(2, 2))
    DeepSpeedPlugin(zero_stage=3, transformer_moe_cls_names="Expert").set_moe_leaf_modules(model)
    assert getattr(model[0], "_z3_leaf", False) is True
    assert not getattr(model[1], "_z3_leaf", False)
    with pytest.raises(ConfigurationError, match=r"names \['Router'\], which the model "
                       "Sequential does not contain"):
        DeepSpeedPlugin(zero_stage=3,
                        transformer_moe_cls_names="Expert, Router").set_moe_leaf_modules(model)
    DeepSpeedPlugin(zero_stage=3).set_moe_leaf_modules(model)  # no names: nothing to do
