"""`accel config`'s questionnaire, branch by branch, answered in-process (typed answers):
the YAML it builds must be what Accelerate writes and must load back to the same settings."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from accel_launch.config_file import load_config_from_file, save_config
from accel_launch.prompts import Prompter
from accel_launch.questionnaire import ask_config


def _ask(answers: list[str], cuda_devices: int) -> tuple[dict, str]:
    out = io.StringIO()
    prompter = Prompter(io.StringIO("\n".join(answers) + "\n"), out, interactive=False)
    return ask_config(prompter, cuda_devices), out.getvalue()


def _load(cfg: dict, tmp_path: Path) -> dict:
    return load_config_from_file(save_config(cfg, tmp_path / "c.yaml")).values


def test_fsdp1_with_parallelism_config_dynamo_options_and_fp8(tmp_path: Path) -> None:
    cfg, screen = _ask(["0", "multi-GPU", "1", "no",
                        "yes", "eager", "yes", "max-autotune", "yes", "no", "yes",  # dynamo
                        "no", "yes", "1", "no", "yes", "TRANSFORMER_BASED_WRAP", "BertLayer",
                        "SHARDED_STATE_DICT", "", "yes",                              # FSDP
                        "yes", "1", "2", "2", "1",                                    # TP/CP
                        "", "", "fp8", ""], cuda_devices=4)
    assert "Which fp8 backend" in screen and "(FSDP2)?" in screen
    assert cfg["distributed_type"] == "FSDP" and cfg["num_processes"] == 4
    assert cfg["gpu_ids"] == "all" and cfg["mixed_precision"] == "fp8"
    assert cfg["dynamo_config"] == {
        "dynamo_backend": "EAGER", "dynamo_mode": "max-autotune", "dynamo_use_fullgraph": True,
        "dynamo_use_dynamic": False, "dynamo_use_regional_compilation": True}
    assert cfg["fsdp_config"] == {
        "fsdp_version": 1, "fsdp_reshard_after_forward": False, "fsdp_offload_params": True,
        "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
        "fsdp_transformer_layer_cls_to_wrap": "BertLayer",
        "fsdp_state_dict_type": "SHARDED_STATE_DICT", "fsdp_cpu_ram_efficient_loading": True,
        "fsdp_activation_checkpointing": True}
    assert cfg["parallelism_config"] == {
        "parallelism_config_dp_replicate_size": 1, "parallelism_config_dp_shard_size": 2,
        "parallelism_config_tp_size": 2, "parallelism_config_cp_size": 1}
    assert cfg["fp8_config"] == {"backend": "AO"}
    values = _load(cfg, tmp_path)
    assert values["use_fsdp"] and values["use_parallelism_config"]
    assert (values["parallelism_config_tp_size"], values["fsdp_version"]) == (2, 1)
    assert (values["dynamo_backend"], values["dynamo_mode"]) == ("eager", "max-autotune")
    assert values["fp8_backend"] == "AO"


def test_deepspeed_json_path_skips_its_questions_and_precision(tmp_path: Path) -> None:
    cfg, screen = _ask(["0", "2", "1", "", "no", "yes", "yes", "/cfg/ds.json", "yes", "",
                        "0,1"], cuda_devices=2)
    assert "ZeRO optimization stage" not in screen and "mixed precision" not in screen
    assert "ParallelismConfig" not in screen  # not offered with DeepSpeed
    assert cfg["distributed_type"] == "DEEPSPEED" and cfg["mixed_precision"] == "no"
    assert cfg["deepspeed_config"] == {"deepspeed_config_file": "/cfg/ds.json",
                                       "zero3_init_flag": True}
    assert (cfg["num_processes"], cfg["gpu_ids"]) == (2, "0,1")
    values = _load(cfg, tmp_path)
    assert values["use_deepspeed"] and values["deepspeed_config_file"] == "/cfg/ds.json"


def test_no_distributed_training_on_a_cpu_machine(tmp_path: Path) -> None:
    cfg, screen = _ask(["0", "", "", "", "bf16"], cuda_devices=0)
    assert "How many processes" not in screen and "GPU(s)" not in screen
    assert (cfg["distributed_type"], cfg["use_cpu"], cfg["num_processes"]) == ("NO", True, 1)
    assert cfg["mixed_precision"] == "bf16" and "dynamo_config" not in cfg
    assert _load(cfg, tmp_path)["cpu"] is True


def test_multi_cpu_on_two_machines(tmp_path: Path) -> None:
    cfg, screen = _ask(["0", "multi-CPU", "2", "1", "10.0.0.2", "", "no", "static", "", "",
                        "", "no"], cuda_devices=0)
    assert "DeepSpeed" not in screen  # engines are offered for multi-GPU only
    assert cfg["distributed_type"] == "MULTI_CPU" and cfg["num_processes"] == 4  # 2 x 2
    assert (cfg["num_machines"], cfg["machine_rank"]) == (2, 1)
    assert (cfg["main_process_ip"], cfg["main_process_port"]) == ("10.0.0.2", 29500)
    assert (cfg["same_network"], cfg["rdzv_backend"]) == (False, "static")
    values = _load(cfg, tmp_path)
    assert values["cpu"] is True and values["machine_rank"] == 1


@pytest.mark.parametrize(("answers", "complaint"), [
    (["0", "multi-GPU", "0"], "Please type a whole number >= 1, got '0'"),
    (["0", "multi-GPU", "1", "maybe"], "Please answer yes or no, got 'maybe'"),
])
def test_bad_typed_answers_are_asked_again(answers: list[str], complaint: str) -> None:
    out = io.StringIO()
    prompter = Prompter(io.StringIO("\n".join(answers) + "\n"), out, interactive=False)
    with pytest.raises(EOFError):  # asked again, then the answers run out
        ask_config(prompter, 2)
    assert complaint in out.getvalue()
