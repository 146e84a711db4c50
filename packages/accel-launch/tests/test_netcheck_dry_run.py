"""The loopback-hostname warning (accel_launch.netcheck) and the torchrun lines of
--dry_run (accel_launch.dry_run.torchrun_command)."""

from __future__ import annotations

from accel_launch.dry_run import torchrun_command
from accel_launch.launch import launch_command_parser
from accel_launch.launch_plan import HostInfo, build_launch_plan
from accel_launch.netcheck import address_to_advertise, loopback_hostname_warning


def _resolve(table: dict[str, list[str]]):
    return lambda name: table.get(name, [])


def test_a_hostname_on_loopback_is_warned_naming_the_interface_that_reaches_machine_0() -> None:
    text = loopback_hostname_warning(
        "10.0.0.1", {}, hostname="node7",
        resolve=_resolve({"node7": ["127.0.1.1"], "10.0.0.1": ["10.0.0.1"]}),
        towards=lambda host: ("10.0.0.2", "ens5"))
    assert text == (
        "this machine's hostname 'node7' resolves to 127.0.1.1 (loopback): gloo and NCCL "
        "would give the other machines that address, and the job would hang or fail to "
        "connect. Set GLOO_SOCKET_IFNAME=ens5 (CPU, gloo) and NCCL_SOCKET_IFNAME=ens5 (GPUs) "
        "in this machine's environment: ens5 holds 10.0.0.2, the address that reaches "
        "machine 0 at 10.0.0.1, or map the hostname to that address in /etc/hosts.")


def test_no_warning_when_an_interface_is_named_or_nothing_is_on_loopback() -> None:
    table = _resolve({"node7": ["127.0.1.1"], "good": ["10.0.0.2"], "10.0.0.1": ["10.0.0.1"],
                      "127.0.0.1": ["127.0.0.1"]})
    kw = {"resolve": table, "towards": lambda host: ("10.0.0.2", "ens5")}
    assert loopback_hostname_warning("10.0.0.1", {"GLOO_SOCKET_IFNAME": "ens5"},
                                     hostname="node7", **kw) is None
    assert loopback_hostname_warning("10.0.0.1", {"NCCL_SOCKET_IFNAME": "ib0"},
                                     hostname="node7", **kw) is None
    assert loopback_hostname_warning("10.0.0.1", {}, hostname="good", **kw) is None
    # every machine on this host (tests, a laptop): loopback is right
    assert loopback_hostname_warning("127.0.0.1", {}, hostname="node7", **kw) is None


def test_c10d_advertises_the_address_towards_machine_0_only_where_the_hostname_is_loopback(
        ) -> None:
    table = _resolve({"node7": ["127.0.1.1"], "good": ["10.0.0.2"], "10.0.0.1": ["10.0.0.1"],
                      "127.0.0.1": ["127.0.0.1"]})
    kw = {"resolve": table, "towards": lambda host: ("10.0.0.2", "ens5")}
    assert address_to_advertise("10.0.0.1", hostname="node7", **kw) == "10.0.0.2"
    assert address_to_advertise("10.0.0.1", hostname="good", **kw) is None
    assert address_to_advertise("127.0.0.1", hostname="node7", **kw) is None


def _plan(*argv: str):
    args = launch_command_parser().parse_args(list(argv))
    return build_launch_plan(args, HostInfo(cpu_count=4, python="/py"), 29400)


def test_torchrun_lines_per_machine() -> None:
    plan = _plan("--cpu", "--num_machines", "2", "--machine_rank", "1", "--main_process_ip",
                 "10.0.0.1", "--main_process_port", "29400", "--num_processes", "4",
                 "--rdzv_timeout", "120", "train.py", "--lr", "1")
    assert torchrun_command(plan, 0) == [
        "torchrun", "--nnodes", "2", "--nproc-per-node", "2", "--node-rank", "0",
        "--rdzv-backend", "static", "--rdzv-endpoint", "10.0.0.1:29400", "--rdzv-id",
        "accel-10.0.0.1-29400", "--rdzv-conf", "timeout=120", "--max-restarts", "0",
        "--monitor-interval", "0.1", "--start-method", "spawn", "--role", "default",
        "--shutdown-timeout", "30", "train.py", "--lr", "1"]
    assert torchrun_command(plan, 1)[5:7] == ["--node-rank", "1"]


def test_torchrun_lines_for_a_module_and_a_program() -> None:
    module = torchrun_command(_plan("--cpu", "-m", "pkg.train", "--x"), 0)
    assert module[-3:] == ["-m", "pkg.train", "--x"]
    program = torchrun_command(_plan("--cpu", "--no_python", "./run.sh", "a"), 0)
    assert program[-3:] == ["--no-python", "./run.sh", "a"]
