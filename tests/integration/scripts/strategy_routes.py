"""``test-logged-ddp`` (tests/plugins, a third-party strategy with typed options) chosen
through every route in 2 processes. Started with ``ACCEL_STRATEGY=test-logged-ddp`` and
``ACCEL_STRATEGY_CONFIG={"log_every": 2, "reduction": "sum", "label": "from-config"}``,
what `accel launch --strategy` / a config file's ``strategy:`` set. Prints
``ROUTES-OK rank=<r>``.

Routes: the launcher's variables; ``Accelerator(strategy=<name>)`` (the same name);
``Accelerator(strategy=<instance>)``; then, with the variables gone, its kwargs handler
(chosen by data, nothing named) and ``Accelerator(strategy=<preset>)``. Each one trains a
step: the all-reduce goes through the strategy's hook (counted) and the typed options
arrive typed (an enum member, an int).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

PLUGINS = Path(__file__).resolve().parents[2] / "plugins"
sys.path.insert(0, str(PLUGINS))  # "installs" accel_test_logged for importlib.metadata

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from accel import Accelerator  # noqa: E402
from accel_parallel import STRATEGIES  # noqa: E402
from accel_state import PartialState  # noqa: E402


def _step(accelerator: Accelerator) -> torch.Tensor:
    """One step on a rank-dependent batch; the weight's gradient as the hook left it."""
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1, bias=False)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    batch = torch.full((2, 3), float(accelerator.process_index + 1))
    accelerator.backward(model(batch).sum())
    grad = accelerator.unwrap_model(model).weight.grad.detach().clone()
    optimizer.step()
    return grad


def main() -> None:
    from accel_test_logged import LoggedDDPKwargs, LoggedDDPStrategy, Reduction

    STRATEGIES._clear()  # entry points re-read with tests/plugins on the path
    rank = dist.get_rank() if dist.is_initialized() else int(os.environ["RANK"])
    # per rank the batch sums to 2*(rank+1) per input: the local gradient is 2, 4 per entry
    summed, averaged = torch.full((1, 3), 6.0), torch.full((1, 3), 3.0)

    by_launcher = Accelerator(cpu=True)
    strategy = by_launcher.strategy
    assert type(strategy) is LoggedDDPStrategy, strategy
    assert strategy.logged.reduction is Reduction.SUM and strategy.logged.log_every == 2
    assert strategy.logged.label == "from-config"
    assert torch.equal(_step(by_launcher), summed) and strategy.reductions == 1

    by_name = Accelerator(cpu=True, strategy="test-logged-ddp")
    assert type(by_name.strategy) is LoggedDDPStrategy
    assert by_name.strategy.logged.reduction is Reduction.SUM  # the launch's options still

    ready = LoggedDDPStrategy(PartialState(), options=LoggedDDPKwargs(label="instance"))
    by_instance = Accelerator(cpu=True, strategy=ready)
    assert by_instance.strategy is ready
    assert torch.equal(_step(by_instance), averaged) and ready.reductions == 1

    os.environ.pop("ACCEL_STRATEGY")
    os.environ.pop("ACCEL_STRATEGY_CONFIG")
    by_handler = Accelerator(cpu=True, kwargs_handlers=[LoggedDDPKwargs(limit=5, log_every=3)])
    assert type(by_handler.strategy) is LoggedDDPStrategy
    assert by_handler.strategy.logged.limit == 5
    assert torch.equal(_step(by_handler), averaged) and by_handler.strategy.reductions == 1

    by_preset = Accelerator(cpu=True, strategy="test-logged-loud")
    assert by_preset.strategy.logged.verbose is True
    _step(by_preset)  # prints "logged-ddp: all-reduce 1"
    print(f"ROUTES-OK rank={rank}", flush=True)


if __name__ == "__main__":
    main()
