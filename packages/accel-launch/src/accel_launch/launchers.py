"""`notebook_launcher` and `debug_launcher`: run a function on N processes from Python.

Both fork the workers through torch's elastic agent (``start_method="fork"``, so a function
defined in a notebook cell needs no pickling) with a static rendezvous, and hand them the
same environment contract `accel launch` writes. Forking after CUDA was initialised breaks
CUDA in the children, so that case is refused with the fix.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from accel_state import env
from accel_state.errors import ConfigurationError

__all__ = ["debug_launcher", "notebook_launcher"]


def _fork_config(nproc: int, num_nodes: int, node_rank: int, master_addr: str, port: int,
                 rdzv_backend: str, rdzv_endpoint: str, rdzv_conf: dict[str, Any] | None,
                 rdzv_id: str, max_restarts: int, monitor_interval: float,
                 log_line_prefix_template: str | None = None) -> Any:
    from torch.distributed.launcher.api import LaunchConfig

    configs = dict(rdzv_conf or {})
    if rdzv_backend == "static":
        configs["rank"] = node_rank
    return LaunchConfig(
        min_nodes=num_nodes, max_nodes=num_nodes, nproc_per_node=nproc,
        run_id=rdzv_id, role="default",
        rdzv_endpoint=rdzv_endpoint or f"{master_addr}:{port}", rdzv_backend=rdzv_backend,
        rdzv_configs=configs, max_restarts=max_restarts, monitor_interval=monitor_interval,
        start_method="fork", log_line_prefix_template=log_line_prefix_template)


def _check_can_fork() -> None:
    import torch
    from accel_state import PartialState

    if torch.cuda.is_initialized():
        raise ConfigurationError(
            "CUDA was initialised in this process before notebook_launcher, so forked workers "
            "cannot use it: restart the kernel (or the Python process) and call "
            "notebook_launcher before any torch.cuda call or .to('cuda') in the notebook.")
    if getattr(PartialState, "_shared_state", None):
        raise ConfigurationError(
            "an Accelerator or PartialState already exists in this process: create it inside "
            "the function given to notebook_launcher, not before (restart the kernel first).")


class _Entrypoint:
    """The worker function with the ``__name__``/``__qualname__`` torch's elastic agent reads.

    A ``functools.partial`` or a callable object lacks them; the agent only uses them as
    labels (logs, error reports). A module-level class, so it pickles whenever the
    function does (spawn start method).
    """

    def __init__(self, function: Callable[..., Any]) -> None:
        self.function = function
        self.__name__ = self.__qualname__ = _callable_name(function)

    def __call__(self, *args: Any) -> Any:
        return self.function(*args)


def _callable_name(function: Callable[..., Any]) -> str:
    name = getattr(function, "__name__", None)
    if isinstance(name, str):
        return name
    inner = getattr(function, "func", None)  # functools.partial (possibly nested)
    if inner is not None and inner is not function:
        return _callable_name(inner)
    return type(function).__name__


def _launch(function: Callable[..., Any], args: tuple[Any, ...], nproc: int, *, cpu: bool,
            mixed_precision: str, port: int, **rdzv: Any) -> None:
    from torch.distributed.launcher.api import elastic_launch

    from accel_launch.elastic import is_port_in_use

    if rdzv.get("node_rank", 0) == 0 and not rdzv.get("rdzv_endpoint") and is_port_in_use(port):
        raise ConfigurationError(
            f"use_port {port} is already in use (another launch still running?): pass "
            "use_port= with a free port, or restart the kernel.")
    out: dict[str, str] = {}
    env.LAUNCHED.set(1, env=out)
    env.FORK_LAUNCHED.set(1, env=out)
    if cpu:
        env.USE_CPU.set("true", env=out)
    if mixed_precision and mixed_precision != "no":
        env.MIXED_PRECISION.set(mixed_precision, env=out)
    if not env.OMP_NUM_THREADS.is_set():
        env.OMP_NUM_THREADS.set(1, env=out)
    config = _fork_config(nproc, port=port, **rdzv)
    with env.patch_environment(**out):
        if not all(isinstance(getattr(function, a, None), str)
                   for a in ("__name__", "__qualname__")):
            function = _Entrypoint(function)
        elastic_launch(config, function)(*args)


def notebook_launcher(function: Callable[..., Any], args: tuple[Any, ...] = (),
                      num_processes: int | None = None, mixed_precision: str = "no",
                      use_port: str | int = "29500", master_addr: str = "127.0.0.1",
                      node_rank: int = 0, num_nodes: int = 1, rdzv_backend: str = "static",
                      rdzv_endpoint: str = "", rdzv_conf: dict[str, Any] | None = None,
                      rdzv_id: str = "none", max_restarts: int = 0,
                      monitor_interval: float = 0.1,
                      log_line_prefix_template: str | None = None) -> None:
    """Run ``function(*args)`` on ``num_processes`` forked processes (per node).

    Default: one process per CUDA device, else one. With one process the function runs
    here, in this process. On a machine without CUDA the processes use the CPU (gloo).
    """
    import torch

    if mixed_precision not in ("no", "fp16", "bf16", "fp8"):
        raise ConfigurationError(f"mixed_precision {mixed_precision!r} is invalid: use no, "
                                 "fp16, bf16 or fp8.")
    cuda = torch.cuda.device_count() if torch.cuda.is_available() else 0
    nproc = num_processes if num_processes is not None else max(1, cuda)
    if nproc < 1 or num_nodes < 1:
        raise ConfigurationError(f"num_processes={nproc} and num_nodes={num_nodes} must be >= 1.")
    if nproc == 1 and num_nodes == 1:
        out = {} if mixed_precision == "no" else {env.MIXED_PRECISION.name: mixed_precision}
        with env.patch_environment(**out):
            function(*args)
        return
    _check_can_fork()
    _launch(function, tuple(args), nproc, cpu=cuda == 0, mixed_precision=mixed_precision,
            port=int(use_port), num_nodes=num_nodes, node_rank=node_rank,
            master_addr=master_addr, rdzv_backend=rdzv_backend, rdzv_endpoint=rdzv_endpoint,
            rdzv_conf=rdzv_conf, rdzv_id=rdzv_id, max_restarts=max_restarts,
            monitor_interval=monitor_interval, log_line_prefix_template=log_line_prefix_template)


def debug_launcher(function: Callable[..., Any], args: tuple[Any, ...] = (),
                   num_processes: int = 2) -> None:
    """Run ``function(*args)`` on ``num_processes`` forked CPU processes (gloo), for tests."""
    from accel_launch.elastic import find_free_port

    if num_processes < 1:
        raise ConfigurationError(f"num_processes={num_processes} must be >= 1.")
    _check_can_fork()
    _launch(function, tuple(args), num_processes, cpu=True, mixed_precision="no",
            port=find_free_port(), num_nodes=1, node_rank=0, master_addr="127.0.0.1",
            rdzv_backend="static", rdzv_endpoint="", rdzv_conf=None, rdzv_id="debug",
            max_restarts=0, monitor_interval=0.1)
