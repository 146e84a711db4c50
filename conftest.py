"""Fixtures for every test of the workspace: a clean launch environment, fresh singletons,
and a one-process gloo group for tests of collectives."""

from __future__ import annotations

import os
import socket

import pytest

_LAUNCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                "MASTER_PORT", "GROUP_RANK", "NODE_RANK", "SLURM_PROCID", "SLURM_NTASKS",
                "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE", "PMI_RANK", "PMI_SIZE",
                "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                "OMPI_COMM_WORLD_LOCAL_SIZE", "MV2_COMM_WORLD_RANK", "MV2_COMM_WORLD_SIZE",
                "MPI_LOCALRANKID", "MPI_LOCALNRANKS")


@pytest.fixture(autouse=True)
def clean_state(monkeypatch: pytest.MonkeyPatch):
    """No launcher variables leak in, and every test starts with unbuilt singletons."""
    for key in list(os.environ):
        if key in _LAUNCH_VARS or key.startswith(("ACCEL_", "ACCELERATE_")):
            monkeypatch.delenv(key)
    _reset_singletons()
    yield
    _reset_singletons()


def _reset_singletons() -> None:
    from accel_state import GradientState, PartialState

    PartialState._reset_state()
    GradientState._reset_state()
    try:  # the facade's, when accel is installed (not in a member's own environment)
        from accel.state import AcceleratorState
    except ImportError:
        return
    AcceleratorState._reset_state()


@pytest.fixture
def gloo_group():
    """A real one-process gloo process group on a free port, destroyed afterwards."""
    import torch.distributed as dist

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dist.init_process_group("gloo", rank=0, world_size=1, init_method=f"tcp://127.0.0.1:{port}")
    try:
        yield
    finally:
        dist.destroy_process_group()
