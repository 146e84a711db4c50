"""--dry_run across machines: the torchrun lines it prints start the same job (run here in
the two namespaces), and a hostname on loopback is warned naming the interface to use."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.multiprocess

SCRIPT = str(Path(__file__).parent / "scripts" / "machines_train.py")


def _dry_run(machines, machine: int, port: int, *extra: str, env=None) -> str:
    launched = machines.launch(machine, "--dry_run", "--cpu", "--num_machines", "2",
                               "--machine_rank", str(machine), "--main_process_ip",
                               machines.addresses[0], "--main_process_port", str(port), *extra,
                               env=env)
    launched.finish(60)
    assert launched.returncode == 0, launched.explain()
    return launched.stdout + launched.stderr


def test_the_printed_torchrun_lines_run_the_job(machines, tmp_path: Path) -> None:
    port = machines.new_port()
    text = _dry_run(machines, 0, port, SCRIPT, "once", str(tmp_path))
    lines = dict(line.strip().split(": ", 1) for line in text.splitlines()
                 if line.strip().startswith("machine rank "))
    block = text.split("worker environment (added to the launcher's):\n", 1)[1]
    worker_env = dict(line.strip().split("=", 1) for line in block.split("\n\n", 1)[0]
                      .splitlines())
    assert set(lines) == {"machine rank 0", "machine rank 1"}
    started = []
    for machine in (0, 1):
        argv = shlex.split(lines[f"machine rank {machine}"])
        assert argv[0] == "torchrun" and argv[argv.index("--node-rank") + 1] == str(machine)
        started.append(machines.start(machine, [sys.executable, "-m", "torch.distributed.run",
                                                *argv[1:]], env=worker_env))
    for one in started:
        one.finish(120)
        assert one.returncode == 0, one.explain()
    assert sorted(p.read_text() for p in tmp_path.glob("rank-*.done")) == ["0", "1"]


def test_a_hostname_on_loopback_is_warned_naming_the_interface(machines) -> None:
    # the test machines' hostname resolves to 127.0.0.1; without GLOO_SOCKET_IFNAME
    text = _dry_run(machines, 1, machines.new_port(), "t.py",
                    env={"GLOO_SOCKET_IFNAME": None, "NCCL_SOCKET_IFNAME": None})
    interface = machines.interfaces[1]
    assert (f"Set GLOO_SOCKET_IFNAME={interface} (CPU, gloo) and NCCL_SOCKET_IFNAME="
            f"{interface} (GPUs) in this machine's environment: {interface} holds "
            f"{machines.addresses[1]}, the address that reaches machine 0 at "
            f"{machines.addresses[0]}") in text, text
    assert "GLOO_SOCKET_IFNAME" not in _dry_run(machines, 1, machines.new_port(), "t.py")
