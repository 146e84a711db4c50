"""Wrote this folder once, with accel-checkpoint 0.3.3 (the last release whose manifests
were format 3 with sha256 records), so later releases are tested against a real old
checkpoint. Run from a checkout of that release: ``python make.py <this folder>``."""

import sys

import torch
from accel_checkpoint import save_checkpoint

model = torch.nn.Linear(4, 2)
with torch.no_grad():
    model.weight.copy_(torch.arange(8.0).reshape(2, 4) / 10)
    model.bias.zero_()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
model(torch.ones(3, 4)).sum().backward()
optimizer.step()
with torch.no_grad():  # the weights the test expects, after the step
    model.weight.copy_(torch.arange(8.0).reshape(2, 4) / 10)
save_checkpoint(sys.argv[1], {"model": model, "optimizer": optimizer}, step=5, rng=False)
