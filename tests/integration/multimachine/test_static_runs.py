"""Static multi-machine runs across two network namespaces train exactly as one machine."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.multiprocess

TRAIN = str(Path(__file__).parent / "scripts" / "machines_train.py")


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
