"""Elastic membership (accel_launch.membership): the machine range, the separate rendezvous
endpoint and what is refused before anything starts; restart counts agreed by the agents."""

from __future__ import annotations

import argparse
import threading
from types import SimpleNamespace

import pytest
from accel_launch.dry_run import torchrun_command
from accel_launch.launch import launch_command_parser
from accel_launch.launch_plan import HostInfo, build_launch_plan, validate_launch_args
from accel_launch.machines import MachinesError, Progress, compare_shapes, job_shape, meet
from accel_launch.resolve import resolve_launch_args
from accel_state.errors import ConfigurationError

CPU_BOX = HostInfo(cpu_count=8, cuda_device_count=0, python="/py")
ELASTIC = ("--cpu", "--min_machines", "2", "--max_machines", "3", "--num_processes", "6",
           "--main_process_ip", "10.0.0.1", "--main_process_port", "29400")


def _args(*argv: str) -> argparse.Namespace:
    return launch_command_parser().parse_args([*argv, "t.py"])


def test_a_range_maps_to_the_agents_min_and_max_nodes_over_c10d() -> None:
    args = _args(*ELASTIC)
    plan = build_launch_plan(args, CPU_BOX, 29400)
    assert (plan.config["min_nodes"], plan.config["max_nodes"]) == (2, 3)
    assert args.num_machines == 3  # left out: it is MAX
    assert plan.config["nproc_per_node"] == 2  # 6 processes of 3 machines
    assert plan.config["rdzv_backend"] == "c10d"
    sources = resolve_launch_args(args).sources
    assert "a machine range needs a re-rendezvous" in sources["rdzv_backend"]
    assert sources["num_machines"] == "--max_machines"
    assert plan.job["shape"]["num_machines"] == "2:3"
    assert plan.job["shape"]["num_processes"] == "4:6"
    assert torchrun_command(plan, 1)[:3] == ["torchrun", "--nnodes", "2:3"]


def test_num_machines_inside_the_range_sets_the_processes_per_machine() -> None:
    plan = build_launch_plan(_args(*ELASTIC, "--num_machines", "2"), CPU_BOX, 29400)
    assert plan.config["nproc_per_node"] == 3
    assert (plan.config["min_nodes"], plan.config["max_nodes"]) == (2, 3)
    fixed = build_launch_plan(_args("--cpu", "--num_machines", "2", "--num_processes", "2",
                                    "--main_process_ip", "10.0.0.1", "--main_process_port",
                                    "29400"), CPU_BOX, 29400)
    assert (fixed.config["min_nodes"], fixed.config["max_nodes"]) == (2, 2)
    assert fixed.config["rdzv_backend"] == "static"
    assert fixed.job["shape"]["num_machines"] == "2"


@pytest.mark.parametrize(("extra", "message"), [
    (("--min_machines", "4", "--max_machines", "3"),
     "--min_machines 4 is more than --max_machines 3: give MIN <= MAX (e.g. --min_machines 3 "
     "--max_machines 4)."),
    (("--min_machines", "0", "--max_machines", "3"),
     "--min_machines 0 is invalid: a job needs at least 1 machine; use --min_machines 1 or "
     "more."),
    (("--min_machines", "2", "--max_machines", "3", "--rdzv_backend", "static"),
     "--min_machines 2 / --max_machines 3 need the c10d rendezvous, which can re-form the job "
     "with another number of machines: pass --rdzv_backend c10d (or leave --rdzv_backend "
     "out), or give one number of machines."),
    (("--min_machines", "2", "--max_machines", "3", "--num_machines", "4"),
     "--num_machines 4 is outside --min_machines 2 .. --max_machines 3: it says how many "
     "machines --num_processes counts; give a number in the range, or leave it out (then it "
     "is --max_machines)."),
    (("--num_machines", "2", "--rdzv_endpoint", "10.0.0.9"),
     "--rdzv_endpoint '10.0.0.9' is invalid: give HOST:PORT with a port between 1 and "
     "65535, e.g. 10.0.0.5:29400."),
])
def test_a_bad_range_or_endpoint_is_refused_before_anything_starts(extra, message) -> None:
    with pytest.raises(ConfigurationError) as caught:
        validate_launch_args(_args("--cpu", "--main_process_ip", "10.0.0.1",
                                   "--main_process_port", "29400", *extra))
    assert str(caught.value) == message


def test_a_rendezvous_endpoint_apart_from_machine_0() -> None:
    argv = ("--cpu", "--num_machines", "2", "--machine_rank", "1", "--rdzv_backend", "c10d",
            "--rdzv_endpoint", "store.example:29500", "--local_addr", "10.0.0.2")
    one, other = (build_launch_plan(_args(*argv), CPU_BOX, port) for port in (41000, 42000))
    assert one.config["rdzv_endpoint"] == "store.example:29500"
    assert one.config["local_addr"] == "10.0.0.2"
    # no --main_process_ip/port needed, and the job id does not depend on a port picked here
    assert one.config["run_id"] == other.config["run_id"] == "accel-store.example-29500"
    named = build_launch_plan(_args(*argv, "--rdzv_id", "job7"), CPU_BOX, 41000)
    assert named.config["run_id"] == "job7"
    command = torchrun_command(named, 1)
    assert command[command.index("--local-addr") + 1] == "10.0.0.2"
    assert command[command.index("--rdzv-id") + 1] == "job7"


def test_a_range_is_compared_as_a_range() -> None:
    def entry(rank: int, high: int) -> dict:
        shape = job_shape(num_machines=(2, high), per_machine=1, mixed_precision=None,
                          strategy="default", config="none")
        return {"rank": rank, "shape": shape}

    assert compare_shapes({0: entry(0, 3), 1: entry(1, 3)}) is None
    message = compare_shapes({0: entry(0, 3), 1: entry(1, 4)})
    assert message is not None
    assert "num_machines: machine rank 0 has 2:3, machine rank 1 has 2:4" in message


def test_the_meeting_returns_every_machines_entry_and_its_restart_count() -> None:
    torch_dist = pytest.importorskip("torch.distributed")
    store = torch_dist.HashStore()
    shape = job_shape(num_machines=(2, 3), per_machine=1, mixed_precision=None,
                      strategy="default", config="none")
    got: dict[int, dict] = {}

    def one(rank: int, restarts: int) -> None:
        got[rank] = meet(store, prefix="t", index=rank, world=2,
                         me={"rank": rank, "shape": shape, "restarts": restarts},
                         progress=Progress("e:1", 10.0, 100.0), claim=False,
                         lost=lambda exc: MachinesError(str(exc)))

    threads = [threading.Thread(target=one, args=(rank, rank)) for rank in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(got) == [0, 1]
    assert {rank: e["restarts"] for rank, e in got[1].items()} == {0: 0, 1: 1}


def test_an_agent_takes_the_highest_restart_count_of_the_machines(monkeypatch) -> None:
    pytest.importorskip("torch.distributed.launcher.api")
    from accel_launch.membership import agreeing_agent, new_agreement
    from torch.distributed.elastic.agent.server.api import SimpleElasticAgent
    from torch.distributed.launcher import api

    handler = SimpleNamespace(restart_agreement=new_agreement())
    seen = {}

    def fake_rendezvous(self, worker_group) -> None:  # the others have restarted once
        seen["mine"] = handler.restart_agreement.mine
        handler.restart_agreement.agreed = 1

    monkeypatch.setattr(SimpleElasticAgent, "_rendezvous", fake_rendezvous)
    original = api.LocalElasticAgent
    with agreeing_agent():
        agent = object.__new__(api.LocalElasticAgent)  # no processes: only the counting
        agent._remaining_restarts = 3
        group = SimpleNamespace(spec=SimpleNamespace(max_restarts=3, rdzv_handler=handler))
        agent._rendezvous(group)  # a membership change restarted this one: still 0
        assert seen["mine"] == 0
        assert agent._remaining_restarts == 2  # TORCHELASTIC_RESTART_COUNT 1, as the others
        handler.restart_agreement.agreed = None
        monkeypatch.setattr(SimpleElasticAgent, "_rendezvous", lambda self, group: None)
        agent._rendezvous(group)  # nothing published (one machine): its own count stays
        assert agent._remaining_restarts == 2
    assert api.LocalElasticAgent is original


def test_a_launcher_says_when_the_machines_met_again_or_an_elastic_job_starts_short() -> None:
    from accel_launch.membership import membership_note

    assert membership_note(0, 0, 3, 2, 3, 2) is None  # all there: nothing to say
    assert membership_note(0, 0, 2, 2, 2, 1) is None
    assert membership_note(0, 0, 2, 2, 3, 2) == (
        "the job starts with 2 of up to 3 machines (--min_machines 2); a machine that joins "
        "later restarts the workers with it.")
    assert membership_note(1, 1, 2, 2, 3, 2) == (
        "the machines met again (restart 1): 2 machine(s) within --min_machines 2 .. "
        "--max_machines 3, 4 process(es) in all; the workers start again from the beginning "
        "of the script (load_state() resumes them from the last checkpoint).")


@pytest.mark.parametrize("failure", ["RendezvousTimeoutError", "RendezvousConnectionError"])
def test_a_job_that_cannot_meet_again_after_a_loss_says_why(failure) -> None:
    rendezvous = pytest.importorskip("torch.distributed.elastic.rendezvous")
    from accel_launch.rendezvous import _MeetingRendezvous

    error = getattr(rendezvous, failure)

    class Gone:  # torch's handler once the machines have met and a machine was lost
        def next_rendezvous(self):
            raise error("from torch")

        def num_nodes_waiting(self):
            raise error("from torch")

    params = SimpleNamespace(endpoint="127.0.0.1:29400", min_nodes=2, max_nodes=3)
    job = {"timeout": 20, "shape": {"processes_per_machine": "1"}, "unreachable_limit": 5}
    handler = _MeetingRendezvous("accel-c10d", Gone(), job, params)
    with pytest.raises(error):  # the first meeting: torch's error, handled as before
        handler.next_rendezvous()
    handler._rounds = 1
    if failure == "RendezvousTimeoutError":
        with pytest.raises(MachinesError) as caught:
            handler.next_rendezvous()
        assert str(caught.value) == (
            "fewer than --min_machines 2 machines met again within 20 s (--rdzv_timeout) "
            "after the workers stopped: the job cannot go on. Its checkpoints are kept: start "
            "at least 2 machines again to resume from the last one.")
    else:
        for call in (handler.next_rendezvous, handler.num_nodes_waiting):
            with pytest.raises(MachinesError) as caught:
                call()
            assert str(caught.value).startswith(
                "the rendezvous at 127.0.0.1:29400 is gone (the machine hosting it was lost: "
                "machine 0, unless --rdzv_endpoint names another host)")
