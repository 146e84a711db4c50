"""Config files: Accelerate's YAML schema across versions, errors, DeepSpeed JSON detection."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from accel_launch.config_file import (
    default_config_file,
    is_deepspeed_json,
    load_config_from_file,
    save_config,
)
from accel_launch.questionnaire import base_config
from accel_state.errors import ConfigurationError

CONFIGS = Path(__file__).parent / "configs"


@pytest.mark.parametrize(("name", "expected"), [
    ("accelerate_0_11.yaml", {"num_processes": 1, "mixed_precision": "fp16",
                              "main_training_function": "main"}),
    ("accelerate_0_12.yaml", {"num_processes": 2, "multi_gpu": True, "mixed_precision": "no",
                              "cpu": False}),
    ("accelerate_0_18_dynamo.yaml", {"dynamo_backend": "inductor", "gpu_ids": "all",
                                     "num_processes": 4, "mixed_precision": "bf16"}),
    ("accelerate_0_28_mpi.yaml", {"cpu": True, "num_machines": 4, "num_processes": 16,
                                  "main_process_port": 29500, "rdzv_backend": "static"}),
    ("accelerate_0_34_fp8.yaml", {"mixed_precision": "fp8", "fp8_backend": "TE",
                                  "fp8_amax_history_len": 1024, "fp8_format": "E4M3",
                                  "fp8_override_linear_precision": "(false, false, false)"}),
    ("accelerate_1_x_fsdp.yaml", {"use_fsdp": True, "fsdp_sharding_strategy": "FULL_SHARD",
                                  "fsdp_transformer_layer_cls_to_wrap": "BertLayer",
                                  "fsdp_use_orig_params": True, "fsdp_offload_params": False}),
    ("accelerate_1_x_deepspeed.yaml", {"use_deepspeed": True, "zero_stage": 2,
                                       "gradient_accumulation_steps": 4,
                                       "gradient_clipping": 1.0,
                                       "offload_optimizer_device": "cpu"}),
    ("accelerate_1_x_parallelism.yaml", {"use_parallelism_config": True, "use_fsdp": True,
                                         "parallelism_config_tp_size": 2, "fsdp_version": 2,
                                         "fsdp_reshard_after_forward": "True"}),
])
def test_accelerate_configs_of_every_version_load(name: str, expected: dict) -> None:
    cfg = load_config_from_file(CONFIGS / name)
    assert cfg is not None and cfg.kind == "yaml"
    for dest, value in expected.items():
        assert cfg.values[dest] == value, (dest, cfg.values)


def test_renamed_keys_keep_their_value(tmp_path: Path) -> None:
    old = tmp_path / "old_fsdp.yaml"  # Accelerate < 0.27 wrote the prefetch policy so
    old.write_text("distributed_type: FSDP\nfsdp_config:\n  fsdp_backward_prefetch_policy: "
                   "BACKWARD_POST\n  fsdp_sharding_strategy: 1\n")
    assert load_config_from_file(old).values["fsdp_backward_prefetch"] == "BACKWARD_POST"
    both = tmp_path / "both.yaml"
    both.write_text("fsdp_config:\n  fsdp_backward_prefetch_policy: BACKWARD_POST\n"
                    "  fsdp_backward_prefetch: NO_PREFETCH\n")
    assert load_config_from_file(both).values["fsdp_backward_prefetch"] == "NO_PREFETCH"
    fp8 = tmp_path / "fp8.yaml"
    fp8.write_text("fp8_config:\n  amax_history_length: 16\n  amax_compute_algorithm: max\n")
    values = load_config_from_file(fp8).values
    assert (values["fp8_amax_history_len"], values["fp8_amax_compute_algo"]) == (16, "max")


def test_mpi_hostfile_of_old_configs_is_ignored_with_a_note() -> None:
    cfg = load_config_from_file(CONFIGS / "accelerate_0_28_mpi.yaml")
    assert "mpirun_hostfile" not in cfg.values
    assert any("mpirun_hostfile is ignored" in note for note in cfg.notes)


def _write(tmp_path: Path, text: str, name: str = "c.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize(("text", "message"), [
    ("num_processs: 2\n", "c.yaml: unknown key 'num_processs' (did you mean "
     "'num_processes'?)"),
    ("fsdp_config:\n  fsdp_ofload_params: true\n",
     "unknown key in fsdp_config: 'fsdp_ofload_params' (did you mean 'fsdp_offload_params'?)"),
    ("num_processes: two\n", "key 'num_processes' has value 'two' of type str; expected an "
     "integer"),
    ("use_cpu: maybe\n", "key 'use_cpu' has value 'maybe' of type str; expected true or false"),
    ("mixed_precision: fp12\n", "expected one of no, fp16, bf16, fp8"),
    ("fsdp_config: [1, 2]\n", "key 'fsdp_config' must be a mapping"),
    ("- a\n- b\n", "must hold a mapping of keys"),
    ("num_processes: [\n", "is not valid YAML"),
    ("compute_environment: AMAZON_SAGEMAKER\n", "AMAZON_SAGEMAKER' is not supported"),
    ("distributed_type: XLA\n", "distributed_type XLA (TPU) is not supported"),
    ("distributed_type: MEGATRON_LM\n", "MEGATRON_LM is refused"),
    ("distributed_type: MULTI_GPUS\n", "did you mean 'MULTI_GPU'"),
])
def test_bad_config_files_name_key_value_and_fix(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=None) as err:
        load_config_from_file(_write(tmp_path, text))
    assert message in str(err.value), str(err.value)


def test_unknown_key_lists_each_valid_key_once(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError) as err:
        load_config_from_file(_write(tmp_path, "num_processs: 2\n"))
    valid = str(err.value).split("valid: ", 1)[1].rstrip(".").split(", ")
    assert "use_cpu" in valid and len(valid) == len(set(valid)), valid


def test_missing_config_file_is_an_error_but_missing_default_is_none(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="not found"):
        load_config_from_file(tmp_path / "nope.yaml")
    assert load_config_from_file() is None  # the hermetic HF_HOME has none


def test_default_location_follows_accelerate(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    assert default_config_file() == tmp_path / "hf" / "accelerate" / "default_config.yaml"
    monkeypatch.delenv("HF_HOME")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_config_file() == (tmp_path / "xdg" / "huggingface" / "accelerate"
                                     / "default_config.yaml")
    monkeypatch.setenv("ACCELERATE_CONFIG_FILE", str(tmp_path / "mine.yaml"))
    assert default_config_file() == tmp_path / "mine.yaml"
    monkeypatch.setenv("ACCEL_CONFIG_FILE", str(tmp_path / "ours.yaml"))
    assert default_config_file() == tmp_path / "ours.yaml"


def test_deepspeed_json_is_detected(tmp_path: Path) -> None:
    ds = _write(tmp_path, json.dumps({"train_micro_batch_size_per_gpu": 2,
                                      "zero_optimization": {"stage": 2}}), "ds_config.json")
    cfg = load_config_from_file(ds)
    assert cfg.kind == "deepspeed_json"
    assert cfg.values == {"use_deepspeed": True, "deepspeed_config_file": str(ds)}
    assert "DeepSpeed JSON" in cfg.label
    legacy = _write(tmp_path, json.dumps({"num_processes": 2, "distributed_type": "MULTI_GPU"}),
                    "default_config.json")  # Accelerate's old JSON config, not DeepSpeed's
    assert not is_deepspeed_json(legacy)
    assert load_config_from_file(legacy).values["num_processes"] == 2


def test_yaml_round_trip(tmp_path: Path) -> None:
    data = {**base_config(), "distributed_type": "FSDP", "num_processes": 8,
            "fsdp_config": {"fsdp_version": 2, "fsdp_offload_params": True,
                            "fsdp_auto_wrap_policy": "SIZE_BASED_WRAP",
                            "fsdp_min_num_params": 1000},
            "dynamo_config": {"dynamo_backend": "INDUCTOR", "dynamo_use_fullgraph": True}}
    path = save_config(data, tmp_path / "sub" / "rt.yaml")
    cfg = load_config_from_file(path)
    assert cfg.raw == data
    assert cfg.values["use_fsdp"] is True and cfg.values["fsdp_min_num_params"] == 1000
    assert cfg.values["dynamo_backend"] == "inductor"
    assert load_config_from_file(save_config(cfg.raw, tmp_path / "again.yaml")).raw == data


@pytest.mark.parametrize("name", ["accelerate_0_34_fp8.yaml", "accelerate_1_x_fsdp.yaml",
                                  "accelerate_1_x_parallelism.yaml"])
def test_loaded_config_writes_back_as_yaml_and_json(tmp_path: Path, name: str) -> None:
    cfg = load_config_from_file(CONFIGS / name)
    as_yaml = load_config_from_file(cfg.to_yaml_file(tmp_path / "out" / "c.yaml"))
    as_json = load_config_from_file(cfg.to_json_file(tmp_path / "c.json"))
    for back in (as_yaml, as_json):
        assert back.kind == "yaml"
        assert back.raw == cfg.raw and back.values == cfg.values
    assert json.loads((tmp_path / "c.json").read_text()) == cfg.raw
    assert (tmp_path / "out" / "c.yaml").read_text().lstrip()[0] != "{"  # YAML, not JSON
    copy = cfg.to_dict()
    copy["num_processes"] = 99
    next(v for v in copy.values() if isinstance(v, dict))["changed"] = 1
    assert "changed" not in str(cfg.raw) and cfg.raw.get("num_processes") != 99


def test_deepspeed_json_config_writes_back_as_json_only(tmp_path: Path) -> None:
    ds = _write(tmp_path, json.dumps({"zero_optimization": {"stage": 3}}), "ds_config.json")
    cfg = load_config_from_file(ds)
    back = load_config_from_file(cfg.to_json_file(tmp_path / "copy" / "ds_config.json"))
    assert back.kind == "deepspeed_json" and back.raw == cfg.raw
    with pytest.raises(ConfigurationError, match="DeepSpeed JSON config.*to_json_file"):
        cfg.to_yaml_file(tmp_path / "ds.yaml")
    assert not (tmp_path / "ds.yaml").exists()
