"""get_mixed_precision_context_manager follows the shared AcceleratorState's precision."""

from __future__ import annotations

import torch
from accel import Accelerator
from accel.state import AcceleratorState
from accel.utils import AutocastKwargs, get_mixed_precision_context_manager


def test_context_follows_the_accelerator_precision():
    Accelerator(cpu=True, mixed_precision="bf16")
    a, b = torch.randn(3, 3), torch.randn(3, 3)
    with get_mixed_precision_context_manager(native_amp=True):
        assert (a @ b).dtype is torch.bfloat16
    with get_mixed_precision_context_manager(native_amp=False):
        assert (a @ b).dtype is torch.float32
    with get_mixed_precision_context_manager(True, AutocastKwargs(enabled=False)):
        assert (a @ b).dtype is torch.float32


def test_context_without_an_accelerator_reads_the_environment(monkeypatch):
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "no")
    monkeypatch.setenv("ACCELERATE_USE_CPU", "1")
    with get_mixed_precision_context_manager(native_amp=True):
        assert (torch.randn(2, 2) @ torch.randn(2, 2)).dtype is torch.float32
    assert AcceleratorState().mixed_precision == "no"
