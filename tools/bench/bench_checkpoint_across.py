"""Loading a checkpoint across layouts (sharded <-> replicated) against raw torch, same run.

One process, a model + Adam state of ``--size-mb``. Floor (``raw``): safetensors
``load_file`` of the model's and the optimizer's tensors, ``model.load_state_dict`` and the
optimizer's ``load_state_dict``. Candidates, alternating with it:

- ``same-layout``: ``load_state`` of a replicated checkpoint into replicated models;
- ``sharded->replicated``: ``load_state`` of a sharded (DCP) checkpoint into models saved
  replicated (DCP rebuilds the full state, which is then checked and put in place);
- ``replicated->sharded``: a replicated checkpoint into models whose strategy names the
  sharded layout (one process: the models are plain, the loader is the cross-layout one);
- ``sharded->sharded``: the sharded checkpoint into models saved sharded (DCP's own load,
  every shard's bytes hash-checked as DCP reads them).

Every accel load verifies every byte first (xxh3-128). A cross-layout load runs once per
resume with another strategy: no target, the ratio is reported.

    uv run python tools/bench/bench_checkpoint_across.py --size-mb 256
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, os.path.dirname(__file__))
from bench_checkpoint import build, fsynced_save, optimizer_tensors  # noqa: E402
from common import interleaved, report  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

from accel import Accelerator  # noqa: E402


def prepared(size_mb: int, layout: str | None):
    accelerator = Accelerator(cpu=True)
    if layout is not None:
        accelerator.strategy.checkpoint_format = lambda models: layout
    model, optimizer = build(size_mb, "cpu")
    model, optimizer = accelerator.prepare(model, optimizer)
    return accelerator, model, optimizer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--size-mb", type=int, default=256, help="model + Adam state, MB")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dir", default=None, help="where to write (default: a temp dir)")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(dir=args.dir))
    saver, model, optimizer = prepared(args.size_mb, None)
    replicated = saver.save_state(root / "replicated")
    sharded = prepared(args.size_mb, "sharded")[0].save_state(root / "sharded")
    fsynced_save(dict(model.state_dict()), root / "raw_model.safetensors")
    fsynced_save(optimizer_tensors(optimizer), root / "raw_optimizer.safetensors")
    groups = optimizer.state_dict()["param_groups"]
    plain = prepared(args.size_mb, None)
    as_sharded = prepared(args.size_mb, "sharded")

    def timed(fn) -> float:  # noqa: ANN001
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start

    def raw() -> None:
        _, target, target_opt = plain
        target.load_state_dict(load_file(root / "raw_model.safetensors"))
        flat = load_file(root / "raw_optimizer.safetensors")
        state: dict[int, dict[str, torch.Tensor]] = {}
        for key, value in flat.items():
            index, name = key.split("/", 1)
            state.setdefault(int(index), {})[name] = value
        target_opt.load_state_dict({"state": state, "param_groups": groups})

    samples = interleaved({
        "raw": lambda: timed(raw),
        "same-layout": lambda: timed(lambda: plain[0].load_state(replicated)),
        "sharded->replicated": lambda: timed(lambda: plain[0].load_state(sharded)),
        "replicated->sharded": lambda: timed(lambda: as_sharded[0].load_state(replicated)),
        "sharded->sharded": lambda: timed(lambda: as_sharded[0].load_state(sharded)),
    }, args.repeats)
    extra = {"size_mb": args.size_mb}
    for candidate in ("same-layout", "sharded->replicated", "replicated->sharded",
                      "sharded->sharded"):
        report("load_across_layouts", "raw", candidate, samples, "s", extra=extra)


if __name__ == "__main__":
    main()
