"""Multi-machine runs across two network namespaces: a static one trains exactly as one
machine; a c10d one starts although the hostname resolves to loopback (machine 0 hosts the
store, publishes its address)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.multiprocess

TRAIN = ONCE_SCRIPT = str(Path(__file__).parent / "scripts" / "machines_train.py")


def test_two_machines_train_exactly_like_one_machine_with_two_processes(
        machines, two_machine_flags, tmp_path: Path) -> None:
    pair = machines.pair([[*flags, TRAIN, "train", str(tmp_path / "2x1")]
                          for flags in two_machine_flags])
    for launched in pair:
        launched.finish(timeout=150)
        assert launched.returncode == 0, launched.explain()
    single = machines.launch(0, "--cpu", "--num_processes", "2", "--main_process_port",
                             str(machines.new_port()), TRAIN, "train", str(tmp_path / "1x2"))
    single.finish(timeout=150)
    assert single.returncode == 0, single.explain()
    across = json.loads((tmp_path / "2x1" / "final.json").read_text())
    local = json.loads((tmp_path / "1x2" / "final.json").read_text())
    assert across["machines"] == ["0", "1"] and local["machines"] == ["0", "0"]
    assert across["world"] == local["world"] == 2
    assert across["weights"] == local["weights"]  # float.hex: bit for bit


def test_a_c10d_run_across_machines_whose_hostname_is_loopback(machines, two_machine_flags,
                                                               tmp_path: Path) -> None:
    pair = machines.pair([[*flags, "--rdzv_backend", "c10d", ONCE_SCRIPT, "once",
                           str(tmp_path)] for flags in two_machine_flags])
    for launched in pair:
        launched.finish(timeout=120)
        assert launched.returncode == 0, launched.explain()
    assert sorted(p.read_text() for p in tmp_path.glob("rank-*.done")) == ["0", "1"]
