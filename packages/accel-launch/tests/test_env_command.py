"""`accel env`: a pasteable block with versions, platform, devices and ACCEL_* variables."""

from __future__ import annotations

import platform

import accel_launch
import pytest
import torch
from accel_launch.cli import main
from accel_launch.env_command import accel_distributions, collect_env_info, format_env_info


def test_accel_distributions_lists_this_package_and_not_others() -> None:
    dists = accel_distributions()
    assert dists["accel-launch"] == accel_launch.__version__
    assert "accel-state" in dists
    assert "torch" not in dists and "accelerate" not in dists


def test_collect_env_info_facts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCEL_MIXED_PRECISION", "bf16")
    monkeypatch.setenv("ACCELERATE_USE_CPU", "1")
    info = collect_env_info()
    assert info["torch version"] == torch.__version__
    assert info["Python version"] == platform.python_version()
    assert info["accel-launch version"] == accel_launch.__version__
    assert info["CPU count"].isdigit()
    assert info["Memory"].endswith("GiB")
    if not torch.cuda.is_available():
        assert info["CUDA devices"] == "none"
    variables = info["ACCEL_*/ACCELERATE_* variables"]
    assert "ACCEL_MIXED_PRECISION=bf16" in variables and "ACCELERATE_USE_CPU=1" in variables


def test_format_is_one_bullet_per_fact() -> None:
    text = format_env_info({"a version": "1", "Platform": "Linux"})
    assert text.splitlines()[2:] == ["- a version: 1", "- Platform: Linux"]


def test_accel_env_command(capsys: pytest.CaptureFixture[str],
                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ACCEL_DEBUG_MODE", raising=False)
    assert main(["env"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Copy-and-paste the text below in your bug report.")
    assert f"- torch version: {torch.__version__}" in out
    assert f"- accel-launch version: {accel_launch.__version__}" in out
    assert "- CUDA devices: " in out
