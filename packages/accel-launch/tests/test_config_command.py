"""`accel config` (real terminal and piped), `config default`, `config update`,
`accel to-fsdp2` and `accel env`'s config section."""

from __future__ import annotations

import argparse
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from accel_launch.cli import main
from accel_launch.config_command import update_config, write_basic_config
from accel_launch.config_file import load_config_from_file
from accel_launch.to_fsdp2 import convert_config_to_fsdp2, register, to_fsdp2_command
from accel_state.errors import ConfigurationError

CONFIGS = Path(__file__).parent / "configs"
DOWN, ENTER = "\x1b[B", "\r"


class Terminal:
    """`python -m accel_launch ARGS` on a pseudo-terminal, driven like a person would."""

    def __init__(self, *argv: str) -> None:
        self.master, slave = pty.openpty()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCEL_", "ACCELERATE_"))}
        self.proc = subprocess.Popen([sys.executable, "-m", "accel_launch", *argv], stdin=slave,
                                     stdout=slave, stderr=slave, env=env, close_fds=True)
        os.close(slave)
        self.seen = ""

    def expect(self, text: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.seen:
            left = deadline - time.monotonic()
            assert left > 0, f"timed out waiting for {text!r}; screen so far:\n{self.seen}"
            ready, _, _ = select.select([self.master], [], [], left)
            if ready:
                try:
                    self.seen += os.read(self.master, 4096).decode(errors="replace")
                except OSError:  # the child closed the terminal
                    assert text in self.seen, self.seen
        self.seen = self.seen[self.seen.index(text) + len(text):]

    def send(self, keys: str) -> None:
        os.write(self.master, keys.encode())

    def answer(self, question: str, keys: str) -> None:
        self.expect(question)
        time.sleep(0.05)  # let the menu switch the terminal mode first
        self.send(keys)

    def close(self) -> int:
        code = self.proc.wait(timeout=60)
        os.close(self.master)
        return code


def test_questionnaire_in_a_real_terminal_with_arrow_keys(tmp_path: Path) -> None:
    target = tmp_path / "fsdp.yaml"
    term = Terminal("config", "--config_file", str(target))
    term.answer("compute environment", ENTER)
    term.answer("Which type of machine", DOWN + DOWN + ENTER)  # multi-GPU
    term.expect("Selected: multi-GPU")
    term.answer("How many different machines", "\n")
    term.answer("checked while running", "yes\n")
    term.answer("torch dynamo", "\n")
    term.answer("DeepSpeed?", "no\n")
    term.answer("(FSDP2)?", "yes\n")
    term.answer("FSDP version", ENTER)
    term.answer("reshard_after_forward", "\n")
    term.answer("offload parameters", "\n")
    term.answer("auto wrap policy", DOWN + ENTER)
    term.expect("Selected: SIZE_BASED_WRAP")
    term.answer("minimum number", "1000\n")
    term.answer("state dict type", DOWN + ENTER)
    term.answer("RAM efficient", "no\n")
    term.answer("activation checkpointing", "\n")
    term.answer("ParallelismConfig", "\n")
    term.answer("How many processes", "4\n")
    term.answer("GPU(s) (by id)", "0,1,2,3\n")
    term.answer("mixed precision", "2" + ENTER)
    term.expect("configuration saved at")
    assert term.close() == 0
    written = yaml.safe_load(target.read_text())
    assert written["distributed_type"] == "FSDP" and written["debug"] is True
    assert written["num_processes"] == 4 and written["gpu_ids"] == "0,1,2,3"
    assert written["mixed_precision"] == "bf16"
    assert written["fsdp_config"] == {
        "fsdp_version": 2, "fsdp_reshard_after_forward": True, "fsdp_offload_params": False,
        "fsdp_auto_wrap_policy": "SIZE_BASED_WRAP", "fsdp_min_num_params": 1000,
        "fsdp_state_dict_type": "FULL_STATE_DICT", "fsdp_cpu_ram_efficient_loading": False,
        "fsdp_activation_checkpointing": False}
    assert load_config_from_file(target).values["use_fsdp"] is True


def _piped(answers: list[str], *argv: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCEL_", "ACCELERATE_"))}
    return subprocess.run([sys.executable, "-m", "accel_launch", "config", *argv],
                          input="\n".join(answers) + "\n", capture_output=True, text=True,
                          env=env, timeout=60)


def test_questionnaire_with_piped_answers_deepspeed(tmp_path: Path) -> None:
    target = tmp_path / "ds.yaml"
    proc = _piped(["0", "multi-GPU", "2", "0", "10.0.0.1", "29400", "", "c10d", "", "yes",
                   "inductor", "no", "yes", "no", "3", "cpu", "cpu", "yes", "no", "8", "yes",
                   "0.5", "no", "16", "all", "bf16"], "--config_file", str(target))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    written = yaml.safe_load(target.read_text())
    assert written["distributed_type"] == "DEEPSPEED"
    assert (written["num_machines"], written["machine_rank"]) == (2, 0)
    assert (written["main_process_ip"], written["main_process_port"]) == ("10.0.0.1", 29400)
    assert written["rdzv_backend"] == "c10d"
    assert written["dynamo_config"] == {"dynamo_backend": "INDUCTOR"}
    assert written["deepspeed_config"] == {
        "zero_stage": 3, "offload_optimizer_device": "cpu", "offload_param_device": "cpu",
        "zero3_init_flag": True, "zero3_save_16bit_model": False,
        "gradient_accumulation_steps": 8, "gradient_clipping": 0.5}
    assert written["num_processes"] == 16 and written["mixed_precision"] == "bf16"
    cfg = load_config_from_file(target)
    assert cfg.values["use_deepspeed"] and cfg.values["zero_stage"] == 3


def test_piped_questionnaire_rejects_bad_answers_and_stops_cleanly(tmp_path: Path) -> None:
    target = tmp_path / "x.yaml"
    proc = _piped(["0", "7", "quantum", "0"], "--config_file", str(target))  # then EOF
    assert "Type a number 0-2 or one of the options, got '7'" in proc.stdout
    assert "got 'quantum'" in proc.stdout
    assert proc.returncode == 1 and "nothing was written" in proc.stderr
    assert not target.exists()


def test_config_default_and_its_refusal_to_overwrite(tmp_path: Path, capsys) -> None:
    target = tmp_path / "d.yaml"
    assert main(["config", "default", "--config_file", str(target), "--mixed_precision",
                 "bf16"]) == 0
    cfg = load_config_from_file(target)
    assert cfg.raw["mixed_precision"] == "bf16" and cfg.raw["num_processes"] >= 1
    assert write_basic_config("no", str(target)) is False
    assert "will not override" in capsys.readouterr().err
    with pytest.raises(ConfigurationError, match="mixed_precision 'fp64' is invalid"):
        write_basic_config("fp64", str(tmp_path / "other.yaml"))


def test_config_update_migrates_old_files(tmp_path: Path) -> None:
    old = tmp_path / "old.yaml"
    old.write_text((CONFIGS / "accelerate_0_11.yaml").read_text())
    assert main(["config", "update", "--config_file", str(old)]) == 0
    raw = yaml.safe_load(old.read_text())
    assert "fp16" not in raw and raw["mixed_precision"] == "fp16"
    assert "deepspeed_config" not in raw and raw["rdzv_backend"] == "static"
    dynamo = tmp_path / "dyn.yaml"
    dynamo.write_text((CONFIGS / "accelerate_0_18_dynamo.yaml").read_text())
    update_config(str(dynamo))
    assert yaml.safe_load(dynamo.read_text())["dynamo_config"] == {"dynamo_backend": "INDUCTOR"}
    renamed = tmp_path / "renamed.yaml"
    renamed.write_text("distributed_type: FSDP\nfsdp_config:\n  fsdp_backward_prefetch_policy: "
                       "BACKWARD_POST\nfp8_config:\n  amax_history_length: 16\n")
    update_config(str(renamed))
    raw = yaml.safe_load(renamed.read_text())
    assert raw["fsdp_config"] == {"fsdp_backward_prefetch": "BACKWARD_POST"}
    assert raw["fp8_config"] == {"amax_history_len": 16}
    with pytest.raises(ConfigurationError, match="nothing to update"):
        update_config(str(tmp_path / "missing.yaml"))


def test_to_fsdp2_converts_fsdp1_keys(tmp_path: Path, capsys, caplog) -> None:
    out = tmp_path / "fsdp2.yaml"
    assert main(["to-fsdp2", "--config_file", str(CONFIGS / "accelerate_1_x_fsdp.yaml"),
                 "--output_file", str(out)]) == 0
    fsdp = yaml.safe_load(out.read_text())["fsdp_config"]
    assert fsdp["fsdp_version"] == 2 and fsdp["fsdp_reshard_after_forward"] is True
    for gone in ("fsdp_sharding_strategy", "fsdp_backward_prefetch", "fsdp_use_orig_params",
                 "fsdp_sync_module_states", "fsdp_forward_prefetch"):
        assert gone not in fsdp
    assert "accel to-fsdp2: fsdp_use_orig_params removed" in caplog.text  # a logger warning
    assert main(["to-fsdp2", "--config_file", str(out)]) == 2  # no --output_file/--overwrite
    assert "--overwrite" in capsys.readouterr().err
    grad_op = {"fsdp_config": {"fsdp_sharding_strategy": "SHARD_GRAD_OP"}}
    converted = convert_config_to_fsdp2(grad_op)  # a dict, as Accelerate's returns
    assert converted == {"fsdp_config": {"fsdp_reshard_after_forward": False,
                                         "fsdp_version": 2}}
    assert grad_op == {"fsdp_config": {"fsdp_sharding_strategy": "SHARD_GRAD_OP"}}  # untouched
    assert convert_config_to_fsdp2(converted) is converted  # FSDP2 already: unchanged
    with pytest.raises(ConfigurationError, match="NO_SHARD has no FSDP2 equivalent"):
        convert_config_to_fsdp2({"fsdp_config": {"fsdp_sharding_strategy": "NO_SHARD"}})


def test_accel_env_shows_the_config_file(tmp_path: Path, capsys) -> None:
    assert main(["env", "--config_file", str(CONFIGS / "accelerate_1_x_fsdp.yaml")]) == 0
    out = capsys.readouterr().out
    assert "- accel config: config file" in out and "config config" not in out
    assert "distributed_type: FSDP" in out
    assert main(["env"]) == 0
    assert "does not exist; run `accel config`" in capsys.readouterr().out


def test_to_fsdp2_file_errors_are_also_the_os_errors_accelerate_raises(tmp_path: Path,
                                                                     capsys) -> None:
    def run(*argv: str) -> None:
        parser = argparse.ArgumentParser()
        register(parser.add_subparsers())
        to_fsdp2_command(parser.parse_args(["to-fsdp2", *argv]))

    missing = tmp_path / "nonexistent.yaml"
    with pytest.raises(FileNotFoundError, match="nonexistent.yaml' not found") as error:
        run("--config_file", str(missing))
    assert isinstance(error.value, ConfigurationError)
    existing = tmp_path / "out.yaml"
    existing.write_text("kept: true\n")
    source = str(CONFIGS / "accelerate_1_x_fsdp.yaml")
    with pytest.raises(FileExistsError, match="out.yaml exists: pass --overwrite") as error:
        run("--config_file", source, "--output_file", str(existing))
    assert isinstance(error.value, ConfigurationError)
    assert existing.read_text() == "kept: true\n"  # left alone
    run("--config_file", source, "--output_file", str(existing), "--overwrite")
    assert yaml.safe_load(existing.read_text())["fsdp_config"]["fsdp_version"] == 2
    assert main(["to-fsdp2", "--config_file", str(missing)]) == 2  # the CLI still reports it
    assert "not found" in capsys.readouterr().err
