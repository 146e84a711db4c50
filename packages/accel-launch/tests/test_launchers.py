"""notebook_launcher / debug_launcher with 2 forked processes, their refusals, and
Accelerate's launch helpers (prepare_*_env)."""

from __future__ import annotations

import argparse
import json
import os
import socket
from pathlib import Path

import pytest
from accel_launch.elastic import find_free_port
from accel_launch.launch import launch_command_parser
from accel_launch.launch_utils import (
    prepare_deepspeed_cmd_env,
    prepare_multi_gpu_env,
    prepare_simple_launcher_cmd_env,
)
from accel_launch.launchers import debug_launcher, notebook_launcher
from accel_state.errors import ConfigurationError


def _record(out: str, tag: str) -> None:
    import torch
    from accel_state import PartialState, env

    state = PartialState()
    total = torch.tensor([float(state.process_index + 1)])
    torch.distributed.all_reduce(total)
    with open(os.path.join(out, f"{tag}{state.process_index}.json"), "w") as f:
        json.dump({"world": state.num_processes, "type": str(state.distributed_type),
                   "sum": total.item(), "fork": env.FORK_LAUNCHED.get(),
                   "precision": env.MIXED_PRECISION.get()}, f)


@pytest.mark.multiprocess
def test_debug_and_notebook_launchers_run_two_processes(tmp_path: Path) -> None:
    debug_launcher(_record, (str(tmp_path), "debug"), num_processes=2)
    notebook_launcher(_record, (str(tmp_path), "nb"), num_processes=2, mixed_precision="bf16",
                      use_port=str(find_free_port()))
    for tag, precision in (("debug", None), ("nb", "bf16")):
        for rank in (0, 1):
            rec = json.loads((tmp_path / f"{tag}{rank}.json").read_text())
            assert rec == {"world": 2, "type": "MULTI_CPU", "sum": 3.0, "fork": "1",
                           "precision": precision}, (tag, rec)


def test_notebook_launcher_with_one_process_runs_here() -> None:
    seen = []
    notebook_launcher(lambda x: seen.append(x), ("here",), num_processes=1)
    assert seen == ["here"]


def test_launcher_refusals(monkeypatch: pytest.MonkeyPatch) -> None:
    from accel_state import PartialState

    with pytest.raises(ConfigurationError, match="mixed_precision 'fp4' is invalid"):
        notebook_launcher(print, num_processes=2, mixed_precision="fp4")
    with pytest.raises(ConfigurationError, match="num_processes=0"):
        debug_launcher(print, num_processes=0)
    with socket.socket() as busy:
        busy.bind(("", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(ConfigurationError, match=f"use_port {port} is already in use"):
            notebook_launcher(print, num_processes=2, use_port=port)
    monkeypatch.setattr(PartialState, "_shared_state", {"initialized": True}, raising=False)
    with pytest.raises(ConfigurationError, match="create it inside the function"):
        notebook_launcher(print, num_processes=2)


def _args(*argv: str) -> argparse.Namespace:
    return launch_command_parser().parse_args(list(argv))


def test_accelerate_launch_helpers_build_command_and_environment() -> None:
    cmd, env = prepare_simple_launcher_cmd_env(_args("--cpu", "--mixed_precision", "bf16",
                                                     "t.py", "--x"))
    assert cmd[1:] == ["-u", "t.py", "--x"]
    assert env["ACCELERATE_MIXED_PRECISION"] == "bf16" and env["ACCELERATE_USE_CPU"] == "true"
    assert "PATH" in env  # the full environment, ready for subprocess.run(env=...)
    multi = prepare_multi_gpu_env(_args("--cpu", "--num_processes", "2", "--main_process_port",
                                        "29411", "t.py"))
    assert (multi["MASTER_ADDR"], multi["MASTER_PORT"]) == ("127.0.0.1", "29411")
    assert (multi["WORLD_SIZE"], multi["LOCAL_WORLD_SIZE"]) == ("2", "2")
    cmd, ds_env = prepare_deepspeed_cmd_env(_args("--use_deepspeed", "--zero_stage", "3",
                                                  "t.py"))
    assert ds_env["ACCELERATE_DEEPSPEED_ZERO_STAGE"] == "3"
    with pytest.raises(ConfigurationError, match="needs --use_deepspeed"):
        prepare_deepspeed_cmd_env(_args("t.py"))
