"""Load a sharded FSDP2 checkpoint saved by another number of processes (DCP reshards), check
the model's output against the one recorded when it was saved, then save again.

argv: checkpoint to load, its recorded output (``torch.save``), directory to save into; the
new checkpoint's output is recorded beside it as ``<directory>_output.pt``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from fsdp_checks import Net, fixed_output

from accel import Accelerator, FullyShardedDataParallelPlugin


def main(source: Path, recorded: Path, target: Path) -> None:
    accelerator = Accelerator(cpu=True, fsdp_plugin=FullyShardedDataParallelPlugin(
        auto_wrap_policy="TRANSFORMER_BASED_WRAP"))
    torch.manual_seed(123)  # other weights than the saved ones: the load must replace them
    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)
    model, optimizer = accelerator.prepare(model, optimizer)
    expected = torch.load(recorded, weights_only=True)
    assert not torch.allclose(fixed_output(model), expected)
    accelerator.load_state(source)
    torch.testing.assert_close(fixed_output(model), expected, rtol=1e-6, atol=1e-6)
    accelerator.save_state(target)
    if accelerator.is_main_process:
        torch.save(fixed_output(model), f"{target}_output.pt")
    else:
        fixed_output(model)  # forward is a collective under FSDP2: every rank runs it
    print(f"RESHARD-OK world={accelerator.num_processes} rank={accelerator.process_index}",
          flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3]))
