"""The Accelerator's DeepSpeed arguments: the three spellings and the multi-plugin form,
the environment, accumulation counts, and the conflicts (FSDP + DeepSpeed, two counts)."""

from __future__ import annotations

import importlib.util

import pytest
from accel import Accelerator, DeepSpeedPlugin
from accel_parallel import FullyShardedDataParallelPlugin
from accel_state import ConfigurationError, DistributedType

# building the strategy needs DeepSpeed installed (the accel[deepspeed] extra): present in the
# README's run, absent from accel's own environment, where these tests skip
needs_deepspeed = pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None,
                                     reason="needs deepspeed (pip install \"accel[deepspeed]\")")


@needs_deepspeed
def test_three_spellings_reach_the_strategy():
    as_dict = Accelerator(cpu=True, deepspeed_plugin={"zero_stage": 3, "gradient_clipping": 1.0})
    as_plugin = Accelerator(cpu=True, deepspeed_plugin=DeepSpeedPlugin(zero_stage=3,
                                                                       gradient_clipping=1.0))
    as_json = Accelerator(cpu=True, deepspeed_plugin=DeepSpeedPlugin(hf_ds_config={
        "zero_optimization": {"stage": 3, "stage3_gather_16bit_weights_on_model_save": False},
        "gradient_clipping": 1.0, "train_batch_size": "auto",
        "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
        "bf16": {"enabled": "auto"}, "fp16": {"enabled": "auto"}}))
    configs = [a.strategy.plugin.deepspeed_config for a in (as_dict, as_plugin, as_json)]
    assert configs[0] == configs[1] == configs[2]
    assert as_dict.distributed_type == DistributedType.DEEPSPEED
    assert type(as_dict.strategy).__name__ == "DeepSpeedStrategy"


@needs_deepspeed
def test_plugin_accumulation_becomes_the_accelerators():
    accelerator = Accelerator(cpu=True, deepspeed_plugin={"gradient_accumulation_steps": 4})
    assert accelerator.gradient_accumulation_steps == 4
    same = Accelerator(cpu=True, gradient_accumulation_steps=4,
                       deepspeed_plugin=DeepSpeedPlugin(gradient_accumulation_steps=4))
    assert same.gradient_accumulation_steps == 4
    with pytest.raises(ConfigurationError, match=r"gradient_accumulation_steps=2 and the "
                       r"DeepSpeed config's gradient_accumulation_steps=4"):
        Accelerator(cpu=True, gradient_accumulation_steps=2,
                    deepspeed_plugin={"gradient_accumulation_steps": 4})


@needs_deepspeed
@pytest.mark.parametrize(("kwargs", "expected"), [
    ({"mixed_precision": "bf16", "deepspeed_plugin": {"zero_stage": 2}}, "bf16"),
    ({"deepspeed_plugin": DeepSpeedPlugin(hf_ds_config={"bf16": {"enabled": True}})}, "bf16"),
    ({"deepspeed_plugin": {"zero_stage": 2}}, "no"),
])
def test_state_says_what_the_engine_runs(kwargs, expected):
    """Accelerate reads the DeepSpeed config: a JSON enabling bf16 is a bf16 run whatever
    mixed_precision= said; no autocast runs around an engine (native_amp False)."""
    import torch

    accelerator = Accelerator(cpu=True, **kwargs)
    assert accelerator.mixed_precision == expected
    assert accelerator.state.mixed_precision == expected
    assert accelerator.native_amp is False
    with accelerator.autocast():
        assert not torch.is_autocast_enabled("cpu")


@needs_deepspeed
def test_mixed_precision_conflict_names_both():
    with pytest.raises(ConfigurationError, match=r"bf16.enabled=False.*'bf16'"):
        Accelerator(cpu=True, mixed_precision="bf16",
                    deepspeed_plugin=DeepSpeedPlugin(hf_ds_config={"bf16": {"enabled": False}}))
    accelerator = Accelerator(cpu=True, mixed_precision="bf16", deepspeed_plugin={})
    assert accelerator.strategy.plugin.get_value("bf16.enabled") is True


@needs_deepspeed
def test_fp16_on_cpu_names_where_it_comes_from():
    with pytest.raises(ConfigurationError, match=r"fp16 does not run on CPU: "
                       r"Accelerator\(mixed_precision='fp16'\) enables it"):
        Accelerator(cpu=True, mixed_precision="fp16", deepspeed_plugin={"zero_stage": 2})
    with pytest.raises(ConfigurationError, match=r"fp16 does not run on CPU: the DeepSpeed config "
                       r"of plugin 'default' \(fp16.enabled=true\) enables it"):
        Accelerator(cpu=True, deepspeed_plugin=DeepSpeedPlugin(hf_ds_config={
            "fp16": {"enabled": True}}))


@needs_deepspeed
def test_named_plugins_are_told_apart_from_a_dict_of_fields():
    student, teacher = DeepSpeedPlugin(zero_stage=2), DeepSpeedPlugin(zero_stage=3)
    accelerator = Accelerator(cpu=True, deepspeed_plugin={"student": student,
                                                          "teacher": teacher})
    strategy = accelerator.strategy
    assert list(strategy.plugins) == ["student", "teacher"]
    assert strategy.plugin is student and student.selected
    teacher.select()
    assert strategy.plugin is teacher and not student.selected
    accelerator.state.select_deepspeed_plugin("student")  # Accelerate's spelling of the same
    assert strategy.plugin is student and accelerator.state.deepspeed_plugin is student
    assert not teacher.selected
    other = Accelerator(cpu=True, deepspeed_plugins={"a": DeepSpeedPlugin()})
    assert list(other.strategy.plugins) == ["a"]


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"deepspeed_plugin": {"a": DeepSpeedPlugin(), "zero_stage": 2}}, r"must be a DeepSpeedPlugin"),
    ({"deepspeed_plugin": 3}, r"deepspeed_plugin=3\) must be"),
    ({"deepspeed_plugins": {"zero_stage": 2}}, r"deepspeed_plugins=.*name -> DeepSpeedPlugin"),
    ({"deepspeed_plugin": DeepSpeedPlugin(), "deepspeed_plugins": {"a": DeepSpeedPlugin()}},
     r"both deepspeed_plugin= and deepspeed_plugins="),
    ({"deepspeed_plugin": {"zero_stage": 9}}, r"zero_stage=9"),
    ({"deepspeed_plugin": DeepSpeedPlugin(), "fsdp_plugin": FullyShardedDataParallelPlugin()},
     r"FSDP and DeepSpeed are both enabled \(fsdp_plugin="),
])
def test_bad_deepspeed_arguments(kwargs, match):
    with pytest.raises(ConfigurationError, match=match):
        Accelerator(cpu=True, **kwargs)


@needs_deepspeed
def test_environment_enables_deepspeed_and_conflicts_with_fsdp(monkeypatch, tmp_path):
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", "1")
    accelerator = Accelerator(cpu=True)
    assert accelerator.strategy.plugin.zero_stage == 1
    # what `accel launch --config_file ds.json` hands the script: the JSON is the config
    import json

    ds_json = tmp_path / "ds.json"
    ds_json.write_text(json.dumps({"zero_optimization": {"stage": 1, "reduce_bucket_size": 7},
                                   "gradient_accumulation_steps": 3}))
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_CONFIG_FILE", str(ds_json))
    accelerator = Accelerator(cpu=True)
    assert accelerator.strategy.plugin.get_value("zero_optimization.reduce_bucket_size") == 7
    assert accelerator.gradient_accumulation_steps == 3
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    with pytest.raises(ConfigurationError, match="ACCELERATE_USE_FSDP=true"):
        Accelerator(cpu=True)
