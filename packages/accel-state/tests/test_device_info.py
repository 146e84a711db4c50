"""Host / GPU facts of accel_state.device_info, with nvidia-smi and the kernel faked so
both branches run on a CPU machine; and the CustomDtype enum."""

from __future__ import annotations

import logging
import os
import platform
import subprocess

import pytest
import torch
from accel_state import ConfigurationError, DistributedType, MissingDependencyError, device_info
from accel_state.enums import CustomDtype


def _fake_smi(monkeypatch, answers: dict[str, str]) -> list[list[str]]:
    calls = []
    monkeypatch.setattr(device_info.shutil, "which", lambda name: "/usr/bin/nvidia-smi")

    def check_output(command, **kwargs):
        calls.append(command)
        query = command[1].split("=", 1)[1]
        return answers[query]

    monkeypatch.setattr(device_info.subprocess, "check_output", check_output)
    return calls


def test_current_device_type_follows_use_cpu(monkeypatch):
    monkeypatch.setenv("ACCELERATE_USE_CPU", "1")
    assert device_info.get_current_device_type() == ("cpu", DistributedType.MULTI_CPU)
    monkeypatch.delenv("ACCELERATE_USE_CPU")
    expected = "cuda" if torch.cuda.is_available() else device_info.select_device_type()
    assert device_info.get_current_device_type()[0] == expected


def test_gpu_info_parses_nvidia_smi(monkeypatch):
    smi = "2, NVIDIA H100 80GB HBM3\n2, NVIDIA H100 80GB HBM3\n"
    calls = _fake_smi(monkeypatch, {"count,name": smi})
    assert device_info.get_gpu_info() == (["NVIDIA H100 80GB HBM3"] * 2, 2)
    assert calls[0][-1] == "--format=csv,noheader"


def test_gpu_info_without_nvidia_smi_says_what_is_missing(monkeypatch):
    monkeypatch.setattr(device_info.shutil, "which", lambda name: None)
    with pytest.raises(FileNotFoundError, match="nvidia-smi is not on PATH"):
        device_info.get_gpu_info()


@pytest.mark.parametrize(("names", "driver", "expected"), [
    ("2, NVIDIA GeForce RTX 4090\n2, NVIDIA GeForce RTX 4090", "535.104.05", False),
    ("2, NVIDIA GeForce RTX 4090\n2, NVIDIA GeForce RTX 4090", "550.40.07", True),
    ("1, NVIDIA GeForce RTX 4090", "535.104.05", True),  # one GPU: no P2P
    ("2, NVIDIA A100\n2, NVIDIA A100", "470.1.1", True),
])
def test_p2p_ib_support(monkeypatch, names, driver, expected):
    _fake_smi(monkeypatch, {"count,name": names, "driver_version": driver})
    assert device_info.check_cuda_p2p_ib_support() is expected


def test_p2p_ib_support_is_true_without_gpus(monkeypatch):
    monkeypatch.setattr(device_info.shutil, "which", lambda name: None)
    assert device_info.check_cuda_p2p_ib_support() is True
    def failing(*a, **k):
        raise subprocess.CalledProcessError(9, "nvidia-smi")
    monkeypatch.setattr(device_info.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(device_info.subprocess, "check_output", failing)
    assert device_info.check_cuda_p2p_ib_support() is True


def test_fp8_capability(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert device_info.check_cuda_fp8_capability() is False
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (9, 0))
    assert device_info.check_cuda_fp8_capability() is True
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (8, 0))
    assert device_info.check_cuda_fp8_capability() is False


def _uname(system: str, release: str) -> platform.uname_result:
    return platform.uname_result(system, "host", release, "#1", "x86_64")


def test_os_kernel_warns_below_5_5(monkeypatch, caplog):
    caplog.set_level(logging.WARNING, logger="accel_state.device_info")
    old = _uname("Linux", "4.15.0-213-generic")
    monkeypatch.setattr(device_info.platform, "uname", lambda: old)
    device_info.check_os_kernel()
    assert "4.15.0-213-generic" in caplog.text and "5.5.0" in caplog.text
    caplog.clear()
    monkeypatch.setattr(device_info.platform, "uname", lambda: _uname("Linux", "6.8.0-49-generic"))
    device_info.check_os_kernel()
    monkeypatch.setattr(device_info.platform, "uname", lambda: _uname("Darwin", "4.0.0"))
    device_info.check_os_kernel()
    assert caplog.text == ""


def test_numa_affinity(monkeypatch):
    with pytest.raises(ConfigurationError, match="local_process_index=-1"):
        device_info.override_numa_affinity(-1)
    before = os.sched_getaffinity(0)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    device_info.override_numa_affinity(0)  # no GPU: nothing to pin to
    assert os.sched_getaffinity(0) == before
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(device_info, "_gpu_cpu_affinity", lambda index: sorted(before)[:1])
    try:
        device_info.override_numa_affinity(0, verbose=True)
        assert os.sched_getaffinity(0) == set(sorted(before)[:1])
    finally:
        os.sched_setaffinity(0, before)


def test_gpu_cpu_affinity_decodes_the_nvml_mask(monkeypatch):
    import sys
    import types

    fake = types.SimpleNamespace(
        nvmlInit=lambda: None, nvmlDeviceGetHandleByIndex=lambda i: ("gpu", i),
        nvmlDeviceGetCpuAffinity=lambda handle, words: [0b1010] + [0] * (words - 1) + [1])
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setattr(device_info.os, "cpu_count", lambda: 128)  # two 64-bit words
    assert device_info._gpu_cpu_affinity(0) == [1, 3, 128]
    monkeypatch.setitem(sys.modules, "pynvml", None)
    with pytest.raises(MissingDependencyError, match="pip install pynvml"):
        device_info._gpu_cpu_affinity(0)


def test_set_numa_affinity_runs_once_per_index(monkeypatch):
    calls = []
    monkeypatch.setattr(device_info, "override_numa_affinity", lambda i, v=None: calls.append(i))
    device_info.set_numa_affinity.cache_clear()
    try:
        device_info.set_numa_affinity(3)
        device_info.set_numa_affinity(3)
        assert calls == [3]
    finally:
        device_info.set_numa_affinity.cache_clear()


def test_custom_dtype_values():
    assert [m.value for m in CustomDtype] == ["fp8", "int4", "int2"]
