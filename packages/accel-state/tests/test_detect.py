"""Launch-environment detection: torchrun, SLURM and MPI variables; device and backend choice."""

from __future__ import annotations

import pytest
from accel_state import ConfigurationError, DistributedType
from accel_state.detect import (
    backend_for_device,
    detect_placement,
    distributed_type_for_device,
    get_cpu_distributed_information,
    select_device_type,
)


def test_no_launcher_means_one_process():
    p = detect_placement()
    assert (p.rank, p.world_size, p.local_rank, p.local_world_size) == (0, 1, 0, 1)


def test_torchrun_variables(monkeypatch):
    for key, value in {"RANK": 3, "WORLD_SIZE": 4, "LOCAL_RANK": 1, "LOCAL_WORLD_SIZE": 2}.items():
        monkeypatch.setenv(key, str(value))
    p = detect_placement()
    assert (p.rank, p.world_size, p.local_rank, p.local_world_size) == (3, 4, 1, 2)
    assert "torchrun" in p.source


def test_slurm_variables(monkeypatch):
    for key, value in {"SLURM_PROCID": 5, "SLURM_NTASKS": 8, "SLURM_LOCALID": 1,
                       "SLURM_NTASKS_PER_NODE": "4(x2)"}.items():
        monkeypatch.setenv(key, str(value))
    info = get_cpu_distributed_information()
    assert (info.rank, info.world_size, info.local_rank, info.local_world_size) == (5, 8, 1, 4)


def test_single_task_slurm_shell_is_not_distributed(monkeypatch):
    monkeypatch.setenv("SLURM_PROCID", "0")
    monkeypatch.setenv("SLURM_NTASKS", "1")
    assert detect_placement().world_size == 1


@pytest.mark.parametrize("prefix", ["OMPI_COMM_WORLD_", "MV2_COMM_WORLD_"])
def test_mpi_variables(monkeypatch, prefix):
    monkeypatch.setenv(prefix + "RANK", "2")
    monkeypatch.setenv(prefix + "SIZE", "4")
    monkeypatch.setenv(prefix + "LOCAL_RANK", "0")
    p = detect_placement()
    assert (p.rank, p.world_size, p.local_rank) == (2, 4, 0)


def test_torchrun_wins_over_slurm(monkeypatch):
    monkeypatch.setenv("SLURM_PROCID", "1")
    monkeypatch.setenv("SLURM_NTASKS", "2")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "3")
    assert detect_placement().world_size == 3


def test_non_integer_variable_is_named(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "two")
    with pytest.raises(ConfigurationError, match="WORLD_SIZE='two'"):
        detect_placement()


def test_device_and_backend_choice(monkeypatch):
    assert select_device_type(cpu=True) == "cpu"
    monkeypatch.setenv("ACCEL_USE_CPU", "1")
    assert select_device_type() == "cpu"
    assert backend_for_device("cpu") == "gloo"
    assert backend_for_device("cuda") == "nccl"
    with pytest.raises(ConfigurationError, match="InitProcessGroupKwargs"):
        backend_for_device("quantum")
    assert distributed_type_for_device("cpu", 1) is DistributedType.NO
    assert distributed_type_for_device("cpu", 2) is DistributedType.MULTI_CPU
    assert distributed_type_for_device("cuda", 2) is DistributedType.MULTI_GPU
