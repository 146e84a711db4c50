"""The machines' meeting before torch's rendezvous (accel_launch.machines), over an
in-memory store shared by threads standing in for the launchers; the plan's job fields."""

from __future__ import annotations

import threading
import time

import pytest
from accel_launch.launch import launch_command_parser
from accel_launch.launch_plan import HostInfo, build_launch_plan
from accel_launch.machines import (
    MachinesError,
    Progress,
    compare_shapes,
    config_digest,
    job_shape,
    meet,
)
from accel_state.errors import ConfigurationError

torch_dist = pytest.importorskip("torch.distributed")


def _shape(**over: object) -> dict[str, str]:
    values = {"num_machines": 2, "per_machine": 1, "mixed_precision": None,
              "strategy": "default", "config": "none", **over}
    return job_shape(**values)


def _me(rank: int, **over: object) -> dict:
    return {"rank": rank, "host": f"host{rank}", "address": f"10.0.0.{rank + 1}", "pid": rank,
            "shape": _shape(**over)}


def _lost(exc: Exception) -> MachinesError:
    return MachinesError(f"lost: {exc}")


def _meet_all(store, entries: dict[int, dict], world: int, limit: float = 10.0,
              claim: bool = True) -> dict[int, object]:
    """Each entry meets in a thread of its own; what each returned (None) or raised."""
    results: dict[int, object] = {}

    def one(key: int, me: dict) -> None:
        try:
            meet(store, prefix="t", index=me["rank"], world=world, me=me,
                 progress=Progress("10.0.0.1:1", limit, 100.0), claim=claim, lost=_lost)
            results[key] = None
        except MachinesError as exc:
            results[key] = str(exc)

    threads = [threading.Thread(target=one, args=item) for item in entries.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return results


def test_machines_that_agree_all_go_on() -> None:
    assert _meet_all(torch_dist.HashStore(), {0: _me(0), 1: _me(1), 2: _me(2)}, 3) == {
        0: None, 1: None, 2: None}


def test_a_mismatch_stops_every_machine_with_one_message_naming_field_values_and_ranks(
        ) -> None:
    results = _meet_all(torch_dist.HashStore(), {0: _me(0), 1: _me(1, num_machines=3)}, 2)
    assert results[0] == results[1]
    assert ("the machines disagree on num_machines: machine rank 0 (host0, 10.0.0.1) has 2, "
            "machine rank 1 (host1, 10.0.0.2) has 3") in results[0]


def test_a_machine_rank_claimed_twice_is_refused_naming_the_holder() -> None:
    store = torch_dist.HashStore()
    assert _meet_all(store, {0: _me(0), 1: _me(1)}, 2) == {0: None, 1: None}
    again = _meet_all(store, {9: {**_me(1), "host": "other", "pid": 99}}, 2)
    assert again[9].startswith("machine rank 1 is taken: machine rank 1 (host1, 10.0.0.2), "
                               "pid 1, joined as --machine_rank 1 first (this is machine "
                               "rank 1 (other, 10.0.0.2)).")


def test_a_machine_that_never_joins_is_named_with_those_that_did() -> None:
    results = _meet_all(torch_dist.HashStore(), {0: _me(0), 2: _me(2)}, 4, limit=0.5)
    assert results[0].startswith("machine ranks 1, 3 never joined within 0 s "
                                 "(--rdzv_timeout); joined: 0, 2.")
    assert results[2] == results[0]  # machine 2 is told the verdict


def test_compare_and_digest() -> None:
    assert compare_shapes({0: _me(0), 1: _me(1)}) is None
    text = compare_shapes({0: _me(0), 1: _me(1, mixed_precision="bf16", strategy="fsdp")})
    assert "mixed_precision: machine rank 0 (host0, 10.0.0.1) has no, machine rank 1" in text
    assert "strategy: machine rank 0 (host0, 10.0.0.1) has default, machine rank 1 (host1, "\
           "10.0.0.2) has fsdp" in text
    assert config_digest(None) == "none"
    assert config_digest({"a": 1, "machine_rank": 0}) == config_digest({"machine_rank": 3,
                                                                          "a": 1})
    assert config_digest({"a": 1}) != config_digest({"a": 2})


def _plan(*argv: str):
    args = launch_command_parser().parse_args(list(argv))
    return build_launch_plan(args, HostInfo(cpu_count=4, python="/py"), 29400,
                             config_digest="abc")


def test_the_plan_carries_the_job_and_bounds_torchs_waits() -> None:
    two = _plan("--cpu", "--num_machines", "2", "--machine_rank", "1", "--main_process_ip",
                "10.0.0.1", "--main_process_port", "29400", "--rdzv_timeout", "120", "t.py")
    assert two.job == {"shape": _shape(config="abc"), "machine_rank": 1, "timeout": 120.0,
                       "unreachable_limit": 45.0}
    assert two.config["rdzv_configs"] == {"rank": 1, "timeout": 120}
    c10d = _plan("--cpu", "--num_machines", "2", "--main_process_ip", "10.0.0.1",
                 "--main_process_port", "29400", "--max_restarts", "1", "t.py")
    assert c10d.config["rdzv_configs"] == {"join_timeout": 300}
    assert _plan("--cpu", "t.py").config["rdzv_configs"] == {"rank": 0}  # one machine: as before
    with pytest.raises(ConfigurationError, match="--rdzv_timeout 0.0 is invalid"):
        _plan("--cpu", "--rdzv_timeout", "0", "t.py")


def test_the_roll_call_names_the_machine_that_stopped_beating() -> None:
    from accel_launch.heartbeat import Heartbeat

    store = torch_dist.HashStore()
    _meet_all(store, {0: _me(0), 1: _me(1), 2: _me(2)}, 3)
    beats = [Heartbeat(store, "t", rank, 3, interval=0.2).start() for rank in range(3)]
    try:
        assert beats[0].roll_call() == []
        beats[2].stop()
        assert beats[0].roll_call() == ["machine rank 2 (host2, 10.0.0.3)"]
        assert beats[1].roll_call() == ["machine rank 2 (host2, 10.0.0.3)"]
    finally:
        for beat in beats:
            beat.stop()


def test_an_address_unreachable_until_the_rendezvous_ends_is_named(monkeypatch) -> None:
    """A loaded machine's first attempt may start late: when the rendezvous time runs out
    before the unreachable limit, the address is still what the error names."""
    import io
    import socket

    from accel_launch import rendezvous

    def times_out(*args, **kwargs):
        raise TimeoutError("timed out")

    monkeypatch.setattr(socket, "create_connection", times_out)
    monkeypatch.setattr(rendezvous.time, "sleep", lambda s: None)
    progress = Progress("10.0.0.9:1", 5.0, 100.0, out=io.StringIO(), started=1.0)  # long over
    with pytest.raises(rendezvous.MachinesError, match=r"cannot reach machine 0 at "
                                                       r"10\.0\.0\.9:1 .* within 12 s"):
        rendezvous.wait_until_reachable("10.0.0.9", 1, progress, 2, unreachable_limit=12.0)


def test_a_silent_machine_is_named_without_waiting_and_not_in_the_exit_barrier() -> None:
    from accel_launch.heartbeat import Heartbeat

    store = torch_dist.HashStore()
    _meet_all(store, {0: _me(0), 1: _me(1)}, 2)
    beats = [Heartbeat(store, "t", rank, 2, interval=0.05).start() for rank in range(2)]
    try:
        assert beats[0].silent(after=0.5) == []  # first heard now
        beats[1].stop()
        assert beats[0].silent(after=0.5) == []  # silent, but not for 0.5 s yet
        time.sleep(0.6)
        assert beats[0].silent(after=0.5) == ["machine rank 1 (host1, 10.0.0.2)"]
        beats[0]._in_exit_barrier = lambda: True  # the workers finished: others may leave
        assert beats[0].silent(after=0.5) == []
    finally:
        for beat in beats:
            beat.stop()


def test_the_watchdog_ends_the_job_when_a_machine_is_lost(tmp_path) -> None:
    from accel_launch.watchdog import Watchdog

    ended = threading.Event()
    dog = Watchdog(str(tmp_path), 1800, poll=0.05, machines=2,
                   lost_machines=lambda: ["machine rank 1 (host1, 10.0.0.2)"])
    dog._end_job = ended.set  # (it would SIGTERM this process's main thread)
    with dog:
        assert ended.wait(5)
    assert dog.lost == ["machine rank 1 (host1, 10.0.0.2)"]
    assert dog.summary == ("machine rank 1 (host1, 10.0.0.2) was lost before the first step "
                           "(no heartbeat, or its connection closed): this machine's workers "
                           "were waiting for it and were stopped (exit code 124).")
