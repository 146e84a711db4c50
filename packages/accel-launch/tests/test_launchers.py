"""notebook_launcher / debug_launcher with 2 forked processes, their refusals, and
Accelerate's launch helpers (prepare_*_env)."""

from __future__ import annotations

import argparse
import functools
import json
import os
import pickle
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
        json.dump({"world": state.num_processes, "type": state.distributed_type.value,
                   "sum": total.item(), "fork": env.FORK_LAUNCHED.get(),
                   "precision": env.MIXED_PRECISION.get()}, f)


@pytest.mark.multiprocess
def test_debug_and_notebook_launchers_run_two_processes(tmp_path: Path) -> None:
    # A functools.partial has no __name__, which torch's elastic agent reads (Accelerate's
    # scheduler tests launch partials): it must still run on both workers.
    debug_launcher(functools.partial(_record, str(tmp_path)), ("debug",), num_processes=2)
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


def test_notebook_launcher_refuses_when_cuda_is_initialised(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import torch
    from accel_state import PartialState

    monkeypatch.setattr(PartialState, "_shared_state", {}, raising=False)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    for launch in (lambda: notebook_launcher(print, num_processes=2),
                   lambda: debug_launcher(print, num_processes=2)):
        with pytest.raises(ConfigurationError) as err:
            launch()
        assert "CUDA was initialised in this process" in str(err.value)
        assert "restart the kernel" in str(err.value)


def test_notebook_launcher_arguments_reach_the_elastic_agent(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import torch
    import torch.distributed.launcher.api as api
    from accel_state import PartialState

    seen: dict = {}

    def fake_elastic_launch(config, entrypoint):
        def run(*args):
            seen.update(config=config, entrypoint=entrypoint, args=args,
                        env={k: os.environ.get(k) for k in
                             ("FORK_LAUNCHED", "ACCEL_MIXED_PRECISION", "ACCEL_USE_CPU")})
        return run

    monkeypatch.setattr(PartialState, "_shared_state", {}, raising=False)
    monkeypatch.setattr(api, "elastic_launch", fake_elastic_launch)
    monkeypatch.delenv("FORK_LAUNCHED", raising=False)
    notebook_launcher(print, ("a", 1), num_processes=3, mixed_precision="fp16", use_port="29999",
                      master_addr="10.0.0.7", node_rank=1, num_nodes=2, max_restarts=2,
                      monitor_interval=0.5, rdzv_conf={"timeout": 5})
    config = seen["config"]
    assert (config.nproc_per_node, config.min_nodes, config.max_nodes) == (3, 2, 2)
    assert config.rdzv_endpoint == "10.0.0.7:29999" and config.rdzv_backend == "static"
    assert config.rdzv_configs == {"timeout": 5, "rank": 1}
    assert (config.max_restarts, config.monitor_interval) == (2, 0.5)
    assert config.start_method == "fork"
    assert seen["entrypoint"] is print and seen["args"] == ("a", 1)
    assert seen["env"] == {"FORK_LAUNCHED": "1", "ACCEL_MIXED_PRECISION": "fp16",
                           "ACCEL_USE_CPU": "true" if not torch.cuda.is_available() else None}
    assert "FORK_LAUNCHED" not in os.environ  # only while the workers run


class _NoName:
    def __call__(self, *args):
        return ("called", args)


def test_launchers_hand_the_agent_a_named_picklable_entrypoint_for_any_callable(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import torch.distributed.launcher.api as api
    from accel_state import PartialState

    seen: list = []

    def fake_elastic_launch(config, entrypoint):
        name = api._get_entrypoint_name(entrypoint, [])  # what the real agent reads
        assert entrypoint.__qualname__.endswith(name)
        return lambda *args: seen.append((name, entrypoint, entrypoint(*args)))

    monkeypatch.setattr(PartialState, "_shared_state", {}, raising=False)
    monkeypatch.setattr(api, "elastic_launch", fake_elastic_launch)
    nested = functools.partial(functools.partial(_NoName(), 1), 2)
    for function, name in ((functools.partial(json.dumps, indent=1), "dumps"),
                           (nested, "_NoName"), (_NoName(), "_NoName")):
        seen.clear()
        debug_launcher(function, (3,), num_processes=2)
        got_name, entrypoint, result = seen[0]
        assert got_name == name
        assert result == function(3)
        clone = pickle.loads(pickle.dumps(entrypoint))  # spawn start method pickles it
        assert clone.__name__ == name and clone(3) == function(3)
    seen.clear()
    notebook_launcher(json.dumps, ("x",), num_processes=2, use_port=str(find_free_port()))
    assert seen[0][1] is json.dumps  # a plain function is passed through unchanged


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


def _namespace_without_script(**values) -> argparse.Namespace:
    """A namespace built in code for Accelerate's helpers: no script, Accelerate's defaults."""
    base = {k: v for k, v in vars(_args("t.py")).items() if not k.startswith("training_script")}
    return argparse.Namespace(**{**base, "use_megatron_lm": False, "megatron_lm_tp_degree": 1,
                                 "megatron_lm_pp_degree": 1, "fsdp_offload_params": False,
                                 "megatron_lm_gradient_clipping": 1.0, **values})


def test_prepare_multi_gpu_env_takes_accelerate_namespaces_and_port_zero() -> None:
    args = _namespace_without_script(cpu=True, num_processes=2, main_process_port=0)
    out = prepare_multi_gpu_env(args)
    assert args.master_port.isdigit() and args.master_port != "0"
    assert out["MASTER_PORT"] == args.master_port == str(args.main_process_port)
    assert out["WORLD_SIZE"] == "2"
    fixed = _namespace_without_script(cpu=True, num_processes=2, main_process_port=29433)
    assert prepare_multi_gpu_env(fixed)["MASTER_PORT"] == fixed.master_port == "29433"
    several = _namespace_without_script(cpu=True, num_processes=2, num_machines=2,
                                        main_process_ip="10.0.0.1", main_process_port=0)
    with pytest.raises(ConfigurationError, match="--main_process_port 0 is invalid"):
        prepare_multi_gpu_env(several)  # the machines could not agree on a random port
    with pytest.raises(ConfigurationError, match="--use_megatron_lm is not supported"):
        prepare_multi_gpu_env(_namespace_without_script(use_megatron_lm=True))
