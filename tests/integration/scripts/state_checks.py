"""Run by tests/integration/test_multiprocess.py in 2 processes through `accel launch --cpu`.

Exercises every PartialState helper, the logger, RNG synchronisation and (through
ops_checks.py) every collective, with real gloo communication. Ends by checking that
InitProcessGroupKwargs(timeout=...) really bounds a collective. Prints one
``CHECKS-OK rank=<r>`` line per rank when everything passed.
"""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from accel_state import (
    DistributedType,
    InitProcessGroupKwargs,
    PartialState,
    gather_object,
    set_seed,
    synchronize_rng_states,
)
from accel_state.logging import get_logger

sys.path.insert(0, str(Path(__file__).parent))
from ops_checks import run_ops_checks  # noqa: E402

TIMEOUT_S = 4


def check_state(state: PartialState, workdir: Path) -> None:
    rank = state.process_index
    assert state.num_processes == 2 and state.use_distributed
    assert state.distributed_type is DistributedType.MULTI_CPU, state.distributed_type
    assert state.backend == "gloo" and state.device == torch.device("cpu")
    assert state.local_process_index == rank
    assert state.is_main_process == (rank == 0) and state.is_last_process == (rank == 1)
    assert PartialState() is not state and PartialState().process_index == rank  # borg
    state.wait_for_everyone()

    marker = workdir / "main_first.txt"
    with state.main_process_first():
        if state.is_main_process:
            time.sleep(0.5)
            marker.write_text("main was here")
        else:
            assert marker.read_text() == "main was here", "main_process_first did not go first"
    local_marker = workdir / "local_first.txt"
    with state.local_main_process_first():
        if state.is_local_main_process:
            local_marker.write_text("local main")
        else:
            assert local_marker.exists()

    ran = [f() for f in (state.on_main_process(lambda: "main"), state.on_last_process(lambda: "last"),
                         state.on_process(lambda: "p1", process_index=1),
                         state.on_local_process(local_process_index=0)(lambda: "l0"))]
    expected = [["main", None, None, "l0"], [None, "last", "p1", None]][rank]
    assert ran == expected, ran

    with state.split_between_processes(list(range(5))) as share:
        assert share == [[0, 1, 2], [3, 4]][rank]
    with state.split_between_processes(list(range(5)), apply_padding=True) as share:
        assert share == [[0, 1, 2], [3, 4, 4]][rank]
    with state.split_between_processes(torch.arange(6).reshape(3, 2)) as share:
        assert share.shape == ((2, 2) if rank == 0 else (1, 2))
    with state.split_between_processes({"a": [1, 2], "b": ["x", "y"]}) as share:
        assert share == [{"a": [1], "b": ["x"]}, {"a": [2], "b": ["y"]}][rank]

    state.print("PRINT-ONCE")  # the test counts it: once per machine


def check_logging_and_rng(state: PartialState) -> None:
    logging.basicConfig(format="%(message)s", stream=sys.stdout, level=logging.INFO, force=True)
    logger = get_logger("state_checks", log_level="INFO")
    logger.info("LOG-MAIN-ONLY")
    logger.info(f"LOG-IN-ORDER rank={state.process_index}", main_process_only=False, in_order=True)
    sys.stdout.flush()

    set_seed(123, device_specific=True)
    draws = gather_object([torch.rand(1).item()])
    assert draws[0] != draws[1], "device_specific seeds must differ across ranks"
    synchronize_rng_states(["torch"])
    draws = gather_object([torch.rand(1).item()])
    assert draws[0] == draws[1], "synchronize_rng_states must make ranks draw the same numbers"
    generator = torch.Generator().manual_seed(state.process_index)
    synchronize_rng_states(["generator"], generator=generator)
    draws = gather_object([torch.rand(1, generator=generator).item()])
    assert draws[0] == draws[1]


def check_timeout_applies(state: PartialState, workdir: Path) -> None:
    """Rank 0 enters a barrier that rank 1 never joins: it must fail after ~TIMEOUT_S."""
    seen = workdir / "timeout_seen"
    state.wait_for_everyone()
    if state.process_index == 0:
        start = time.monotonic()
        try:
            dist.barrier()
        except Exception as error:  # gloo raises RuntimeError/DistBackendError on timeout
            elapsed = time.monotonic() - start
            seen.write_text("1")
            assert TIMEOUT_S - 1 <= elapsed <= TIMEOUT_S + 10, f"timed out after {elapsed:.1f}s"
            print(f"TIMEOUT-APPLIED after {elapsed:.1f}s: {type(error).__name__}", flush=True)
        else:
            seen.write_text("0")
            raise AssertionError("barrier without a partner returned: the timeout did not apply")
    else:
        # stay alive so rank 0 sees a timeout, not a closed peer: until rank 0 says it is done
        # (not a fixed TIMEOUT_S + 4 s sleep); the deadline only bounds a broken rank 0
        deadline = time.monotonic() + TIMEOUT_S + 60
        while not seen.exists() and time.monotonic() < deadline:
            time.sleep(0.05)


def main() -> None:
    workdir = Path(sys.argv[1])
    state = PartialState(**InitProcessGroupKwargs(timeout=TIMEOUT_S).to_kwargs())
    check_state(state, workdir)
    check_logging_and_rng(state)
    run_ops_checks(state.process_index, state.num_processes)
    state.wait_for_everyone()
    print(f"CHECKS-OK rank={state.process_index}", flush=True)
    check_timeout_applies(state, workdir)


if __name__ == "__main__":
    main()
