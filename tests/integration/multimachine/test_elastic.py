"""Elastic membership across three network namespaces: a MIN:MAX = 2:3 job loses a machine
mid-epoch and finishes on the two left, exactly as a straight run that changes from three
processes to two at the same checkpoint."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.multiprocess

SCRIPT = str(Path(__file__).parent / "scripts" / "elastic_train.py")
SIZE = 36  # as in the script
# torch's defaults would take ~45 s to re-form the job (15 s to drop the lost machine's
# keep-alive, 30 s of last call for a machine that might still come): seconds here
FAST_RDZV = "last_call_timeout=5,keep_alive_interval=1,keep_alive_max_attempt=3"


def _steps(out: Path) -> list[dict]:
    return [json.loads(line) for path in sorted(out.glob("steps-*.jsonl"))
            for line in path.read_text().splitlines() if line.endswith("}")]


def test_a_machine_lost_mid_run_the_job_finishes_on_the_others_exactly(
        three_machines, tmp_path: Path) -> None:
    out, ref = tmp_path / "run", tmp_path / "reference"
    flags = ["--cpu", "--min_machines", "2", "--max_machines", "3", "--num_processes", "3",
             "--max_restarts", "1", "--monitor_interval", "0.2", "--rdzv_conf", FAST_RDZV,
             "--main_process_ip", three_machines.addresses[0], "--main_process_port",
             str(three_machines.new_port())]
    trio = three_machines.pair([[*flags, "--machine_rank", str(rank), SCRIPT, "train", str(out)]
                                for rank in range(3)])
    deadline = time.monotonic() + 120
    while not (out / "ready").exists():
        for one in trio:
            if one.popen.poll() is not None:
                one.finish(5)
                pytest.fail("a launcher ended before the first checkpoint\n" + one.explain())
        assert time.monotonic() < deadline, "the three machines did not reach step 2"
        time.sleep(0.1)
    lost, lost_at = time.monotonic(), time.time()
    three_machines.kill_machine(2)
    # the straight run: step 2's checkpoint of the three machines, continued on two
    straight = three_machines.launch(0, "--cpu", "--num_processes", "2", "--main_process_port",
                                     str(three_machines.new_port()), SCRIPT, "reference",
                                     str(ref), str(out / "checkpoints" / "checkpoint_0"))
    for one in trio[:2]:
        one.finish(timeout=120)
        assert one.returncode == 0, one.explain()
    finished = max(one.ended for one in trio[:2]) - lost
    final = json.loads((out / "final.json").read_text())
    assert final["world"] == 2 and sorted(final["machines"]) == ["0", "1"], final
    assert final["restart_counts"] == [1, 1], final  # TORCHELASTIC_RESTART_COUNT agrees
    resumed = final["resumed_from"]
    assert resumed == 2, final  # the three machines' checkpoint

    steps = _steps(out)
    first = [s for s in steps if s["attempt"] == 0 and s["step"] <= resumed]
    second = [s for s in steps if s["attempt"] == 1]
    assert {s["world"] for s in first} == {3} and {s["world"] for s in second} == {2}
    assert sorted(i for s in first + second for i in s["ids"]) == list(range(SIZE))
    assert final["steps"] == resumed + (SIZE - 6 * resumed) // 4

    straight.finish(timeout=120)
    assert straight.returncode == 0, straight.explain()
    reference = json.loads((ref / "final.json").read_text())
    assert reference["resumed_from"] == resumed and reference["steps"] == final["steps"]
    assert final["weights"] == reference["weights"]  # float.hex: bit for bit
    back = min(s["time"] for s in second) - lost_at
    print(f"machine 2 lost after step 2's checkpoint: the others made their first "
          f"step on two machines {back:.1f} s after the loss and finished after {finished:.1f} s")
