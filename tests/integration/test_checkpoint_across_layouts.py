"""Checkpoints load across layouts and world sizes (scripts/checkpoint_across_layouts.py).

One run in 2 processes (in the launch it shares with other check scripts: conftest's
shared_launch): a DDP (replicated) checkpoint into FSDP2 models and the FSDP2
(sharded) one back into DDP models, weights, Adam's state and the scheduler equal to the
saved ones and the next step equal to the unbroken run's; a damaged shard and a model of
another shape refused with nothing changed. Then, in this process (a world of one), the
2-process sharded checkpoint into an unsharded model and into an FSDP2 model, and the
2-process replicated one into that FSDP2 model.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.multiprocess


@pytest.mark.shared_launch("checkpoint_across_layouts.py", "save", "{out}")
def test_ddp_and_fsdp2_checkpoints_load_into_each_other(explain, shared_launch, run_here,
                                                        scripts, capsys):
    script = scripts / "checkpoint_across_layouts.py"
    proc, tmp_path = shared_launch, shared_launch.out
    assert proc.returncode == 0, explain(proc)
    for rank in (0, 1):
        for line in (f"DDP-INTO-FSDP rank={rank} layout=replicated changed=True equal=True "
                     "step=3 next=True",
                     f"FSDP-INTO-DDP rank={rank} layout=sharded equal=True step=3 next=True",
                     f"CORRUPT-REFUSED rank={rank} named=True unchanged=True",
                     f"MISFIT-REFUSED rank={rank} shapes=True unchanged=True"):
            assert line in proc.stdout, explain(proc)
    run_here(script, "load", str(tmp_path))
    out = capsys.readouterr().out
    for line in ("SHARDED-2-INTO-PLAIN-1 equal=True", "SHARDED-2-INTO-FSDP-1 sharded=True "
                 "equal=True", "REPLICATED-2-INTO-FSDP-1 step=3 equal=True"):
        assert line in out, out
