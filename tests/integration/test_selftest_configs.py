"""`accel test` passes on every kind of configuration `accel config` writes: fp32, bf16 and
fp8 (torchao) on the CPU, DeepSpeed ZeRO-2 and FSDP2 in bf16 (fp16 needs an accelerator).

Each config is built as the questionnaire builds it (its ``base_config()`` plus the keys its
branches add), saved as YAML, and turned into the workers' environment by the launcher's own
plan; the bundled test script then runs in one process with that environment: the test's
own (run_here) or, for the DeepSpeed and torchao configs, a plain process of its own (a
launch per config would cost ~10 s each; the 2-process launch of `accel test` is in
test_launch_elastic.py). The tolerances per precision are the script's own.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
from accel_launch.config_file import save_config
from accel_launch.launch import launch_command_parser
from accel_launch.launch_plan import HostInfo, build_launch_plan
from accel_launch.questionnaire import base_config
from accel_launch import selftest

CONFIGS = {
    "fp32": {"mixed_precision": "no"},
    "bf16": {"mixed_precision": "bf16"},
    "fp8-ao": {"mixed_precision": "fp8", "fp8_config": {"backend": "AO"}},
    "deepspeed-zero2-bf16": {
        "distributed_type": "DEEPSPEED", "mixed_precision": "bf16",
        "deepspeed_config": {"zero_stage": 2, "offload_optimizer_device": "none",
                             "gradient_accumulation_steps": 1}},
    "fsdp2-bf16": {
        "distributed_type": "FSDP", "mixed_precision": "bf16",
        "fsdp_config": {"fsdp_version": 2, "fsdp_reshard_after_forward": True,
                        "fsdp_offload_params": False, "fsdp_auto_wrap_policy": "NO_WRAP",
                        "fsdp_state_dict_type": "SHARDED_STATE_DICT",
                        "fsdp_cpu_ram_efficient_loading": True,
                        "fsdp_activation_checkpointing": False}},
}
NEEDS = {"fp8-ao": "torchao", "deepspeed-zero2-bf16": "deepspeed"}


def _worker_env(config: Path) -> dict[str, str]:
    """What `accel launch --config_file CONFIG` hands its workers."""
    args = launch_command_parser().parse_args(
        ["--config_file", str(config), "--num_processes", "1", str(selftest.test_script_path())])
    plan = build_launch_plan(args, HostInfo(cpu_count=2), 0)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCEL_", "ACCELERATE_"))}
    env.update(plan.env)
    env.update(ACCEL_DEEPSPEED_SHM_COMM="0", PYTHONUNBUFFERED="1")
    return env


#: configs whose run imports a heavy backend (DeepSpeed, torchao) keep a process of their own;
#: the others run the script in the test's process with the same environment (run_here)
OWN_PROCESS = {"fp8-ao", "deepspeed-zero2-bf16"}


@pytest.mark.parametrize("name", CONFIGS)
def test_accel_test_passes_on_each_questionnaire_config(name: str, tmp_path: Path, run_here,
                                                        capsys, monkeypatch) -> None:
    if name in NEEDS and importlib.util.find_spec(NEEDS[name]) is None:
        pytest.skip(f"needs {NEEDS[name]}")
    cfg = base_config() | {"use_cpu": True} | CONFIGS[name]
    config = save_config(cfg, tmp_path / f"{name}.yaml")
    env = _worker_env(config)
    if name in OWN_PROCESS:
        proc = subprocess.run([sys.executable, str(selftest.test_script_path())], env=env,
                              capture_output=True, text=True, timeout=240, cwd=tmp_path)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        out = proc.stdout
    else:
        for key in [k for k in os.environ if k not in env]:
            monkeypatch.delenv(key)
        for key, value in env.items():
            monkeypatch.setenv(key, value)
        monkeypatch.chdir(tmp_path)
        run_here(selftest.test_script_path())
        out = capsys.readouterr().out
    assert f"mixed precision {CONFIGS[name]['mixed_precision']}" in out, out
    assert "Test is a success!" in out, out
