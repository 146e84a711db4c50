"""Several machines: the same script, started once per machine by `accel launch`.

On each of 2 machines (here 1 process each; ``--num_processes`` counts all machines), with
``--main_process_ip`` the address of machine 0 and any free port:

    # on machine 0 (10.0.0.1)
    accel launch --num_machines 2 --machine_rank 0 --num_processes 2 \
        --main_process_ip 10.0.0.1 --main_process_port 29400 examples/multi_node.py
    # on machine 1
    accel launch --num_machines 2 --machine_rank 1 --num_processes 2 \
        --main_process_ip 10.0.0.1 --main_process_port 29400 examples/multi_node.py

To try it on one computer, run both commands in two terminals with ``--cpu`` and
``--main_process_ip 127.0.0.1``. Add ``--cpu`` on CPU-only machines; on GPU machines
``--num_processes`` is usually machines x GPUs per machine. Under SLURM,
``srun --ntasks-per-node=1 accel launch --main_process_port 29400 examples/multi_node.py``
needs no other flag. Nothing in the script knows about machines: each process prints where
it runs, the processes train one model data-parallel, and the script checks that every
process ends with the same weights.
"""

from __future__ import annotations

import socket

import torch
from accel import Accelerator
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main() -> None:
    torch.manual_seed(0)
    accelerator = Accelerator()
    print(f"process {accelerator.process_index} of {accelerator.num_processes} "
          f"(local index {accelerator.local_process_index}) on {socket.gethostname()}, "
          f"device {accelerator.device}", flush=True)

    generator = torch.Generator().manual_seed(1)
    x = torch.randn(256, 8, generator=generator)
    loader = DataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True)), batch_size=16,
                        shuffle=True)
    model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)

    for epoch in range(3):
        total = torch.zeros((), device=accelerator.device)
        for xb, yb in loader:
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(xb), yb)
            accelerator.backward(loss)
            optimizer.step()
            total += loss.detach()
        mean = accelerator.reduce(total / len(loader), reduction="mean")
        accelerator.print(f"epoch {epoch}: loss {mean.item():.4f}")

    flat = torch.cat([p.detach().flatten() for p in accelerator.unwrap_model(model).parameters()])
    replicas = accelerator.gather(flat.unsqueeze(0))
    same = bool(torch.equal(replicas.min(0).values, replicas.max(0).values))
    accelerator.print(f"parameters identical on all {accelerator.num_processes} processes: {same}")
    if not same:
        raise SystemExit("parameters diverged across processes")


if __name__ == "__main__":
    main()
