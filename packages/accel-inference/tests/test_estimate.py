"""The memory estimator: sizes per dtype, per-rank shares, and estimates within 15% of the
peak memory measured while really training (CPU, peak RSS of a fresh process)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from accel_inference.cli_estimate import estimate_command, register, run_calibration
from accel_inference.estimate import TrainingSetup, estimate_training, estimate_weights
from accel_inference.model_specs import build_model
from accel_state.errors import ConfigurationError, MissingDependencyError

MODELS = Path(__file__).with_name("models.py")


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    return parser.parse_args(["estimate-memory", *argv])


def _raise_own_peak_rss(to: int = 3 << 29) -> None:
    """Make this (parent) process's peak RSS at least ``to`` bytes, as a long pytest run's is.

    Linux carries a parent's peak RSS into its child's ``ru_maxrss`` across fork/exec: read
    there, the calibration of a model smaller than the parent measured the parent (lm_small:
    0.81 of the estimate inside the whole suite, 0.92-0.95 alone). The calibration reads its
    own high-water mark instead; this makes the test fail whatever order it runs in if not.
    """
    with open("/proc/self/status") as handle:
        peak = next(int(line.split()[1]) * 1024 for line in handle if line.startswith("VmHWM:"))
    if peak < to:
        block = bytearray(to - peak)
        block[::4096] = b"\1" * len(range(0, len(block), 4096))  # touch every page
        del block


_LMS = ("lm_small", "lm_medium", "lm_large")


def _lm_args(factory: str) -> argparse.Namespace:
    return _args(f"{MODELS}:{factory}", "--training", "--batch_size", "8", "--seq_len", "64")


@pytest.fixture(scope="module")
def measured_peaks() -> dict[str, int | BaseException]:
    """``run_calibration`` of the three models, started together: each is a fresh process of
    its own that measures its own peak RSS (threads of this process only wait on them), so
    running them side by side changes no measurement and overlaps their torch imports."""
    from concurrent.futures import ThreadPoolExecutor

    _raise_own_peak_rss()

    def calibrate(factory: str) -> int | BaseException:
        try:
            return run_calibration(_lm_args(factory))
        except BaseException as error:  # reported by the test of that model
            return error

    with ThreadPoolExecutor(len(_LMS)) as pool:
        return dict(zip(_LMS, pool.map(calibrate, _LMS), strict=True))


@pytest.mark.parametrize("factory", _LMS)
def test_training_estimate_within_15_percent_of_measured_peak(factory, measured_peaks):
    args = _lm_args(factory)
    model = build_model(args.model_name)
    estimate = estimate_training(model, TrainingSetup(batch_size=8, seq_len=64,
                                                      strategy="none"))
    assert estimate.activations and estimate.activations > 0.1 * estimate.peak
    measured = measured_peaks[factory]
    if isinstance(measured, BaseException):
        raise measured
    assert 0.85 <= estimate.peak / measured <= 1.15, (estimate.as_dict(), measured)


def test_weights_table_per_dtype():
    model = build_model(f"{MODELS}:mlp")
    rows = {r["dtype"]: r for r in estimate_weights(model, ["float32", "float16", "int4"])}
    params = 8 * (512 * 512 + 512)
    assert rows["float32"]["parameters"] == params and rows["float32"]["total_size"] == params * 4
    assert rows["float16"]["total_size"] == params * 2 and rows["int4"]["total_size"] == params // 2
    assert rows["float32"]["largest_layer"] == (512 * 512 + 512) * 4
    assert next(model.parameters()).is_meta  # sized without allocating


def test_per_rank_shares_under_ddp_and_zero():
    model = build_model(f"{MODELS}:mlp")
    one = estimate_training(model, TrainingSetup(strategy="none"))
    ddp = estimate_training(model, TrainingSetup(num_processes=4, strategy="ddp"))
    zero1 = estimate_training(model, TrainingSetup(num_processes=4, strategy="zero1"))
    zero2 = estimate_training(model, TrainingSetup(num_processes=4, strategy="zero2"))
    zero3 = estimate_training(model, TrainingSetup(num_processes=4, strategy="zero3"))
    assert ddp.replication_buffers == one.gradients and ddp.weights == one.weights
    assert zero1.optimizer_states == one.optimizer_states // 4 and zero1.gradients == one.gradients
    assert zero2.gradients == one.gradients // 4
    assert zero3.weights == one.weights // 4 and zero3.gathered_layer > 0
    assert one.peak > zero1.peak > zero2.peak > zero3.peak
    sgd = estimate_training(model, TrainingSetup(optimizer="sgd"))
    adam8 = estimate_training(model, TrainingSetup(optimizer="adam8bit"))
    assert sgd.optimizer_states == 0 and adam8.optimizer_states == one.optimizer_states // 4
    half = estimate_training(model, TrainingSetup(mixed_precision="bf16", batch_size=64))
    full = estimate_training(model, TrainingSetup(batch_size=64))
    assert half.activations == full.activations // 2


def test_cli_json_and_errors(capsys, tmp_path):
    assert estimate_command(_args(f"{MODELS}:mlp", "--training", "--num_processes", "2",
                                  "--strategy", "fsdp", "--json")) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["training"]["strategy"] == "fsdp" and report["training"]["peak"] > 0
    assert [r["dtype"] for r in report["weights"]] == ["float32", "float16", "int8", "int4"]
    estimate_command(_args(f"{MODELS}:mlp"))
    assert "Largest layer" in capsys.readouterr().out
    with pytest.raises(ConfigurationError, match="'nope'"):
        build_model("nope")
    with pytest.raises(ConfigurationError, match="'missing_factory'"):
        build_model(f"{MODELS}:missing_factory")
    with pytest.raises(ConfigurationError, match="'no_such_module_xyz'"):
        build_model("no_such_module_xyz:build")
    (tmp_path / "config.json").write_text("{}")
    try:
        import transformers  # noqa: F401
    except ImportError:
        with pytest.raises(MissingDependencyError, match="transformers"):
            build_model(str(tmp_path))
        with pytest.raises(MissingDependencyError, match="transformers"):
            build_model("org/some-model")
    with pytest.raises(ConfigurationError, match="'rmsprop'"):
        TrainingSetup(optimizer="rmsprop")
    with pytest.raises(ConfigurationError, match="batch_size=0"):
        TrainingSetup(batch_size=0)


def test_verb_is_registered_and_help_does_not_import_torch():
    import importlib.metadata
    import subprocess
    import sys

    (entry,) = [ep for ep in importlib.metadata.entry_points(group="accel.cli")
                if ep.name == "estimate-memory"]
    assert entry.value == "accel_inference.cli_estimate:register"
    probe = ("import argparse, sys\n"
             "from accel_inference.cli_estimate import register\n"
             "parser = argparse.ArgumentParser(prog='accel')\n"
             "register(parser.add_subparsers())\n"
             "try:\n    parser.parse_args(['estimate-memory', '--help'])\n"
             "except SystemExit:\n    pass\n"
             "print('TORCH=' + str('torch' in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    assert "--library_name" in out and "--calibrate" in out and "TORCH=False" in out
