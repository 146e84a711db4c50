"""accel.test_utils: Accelerate's test helpers (decorators, launch commands, regression model,
example comparison) behave as Accelerate's do, on accel's own objects."""

from __future__ import annotations

import sys
import textwrap
import unittest
from pathlib import Path

import numpy as np
import pytest
import torch
from accel_state import PartialState
from accel_state.errors import MissingDependencyError

import accel
from accel.state import AcceleratorState, GradientState
from accel.test_utils import examples, testing, training


def _skipped(decorated) -> bool:
    return bool(getattr(decorated, "__unittest_skip__", False))


def _a_test():
    pass


# --- decorators -------------------------------------------------------------------------------

_LIBRARY_DECORATORS = sorted(
    name for name, obj in vars(testing).items()
    if name.startswith("require_") and (obj.__doc__ or "").startswith("Skip unless ``is_"))


def test_the_library_decorators_cover_accelerates_list():
    assert len(_LIBRARY_DECORATORS) >= 25
    assert {"require_wandb", "require_deepspeed", "require_peft"} <= set(_LIBRARY_DECORATORS)


@pytest.mark.parametrize("name", _LIBRARY_DECORATORS)
def test_a_library_decorator_skips_exactly_when_its_check_is_false(name, monkeypatch):
    decorator = getattr(testing, name)
    check = decorator.__doc__.split("``")[1].removesuffix("()")
    monkeypatch.setattr(testing, check, lambda *a, **k: True)
    assert not _skipped(decorator(_a_test))
    monkeypatch.setattr(testing, check, lambda *a, **k: False)
    assert _skipped(decorator(_a_test))


@pytest.mark.parametrize("name", ["require_xpu", "require_single_xpu", "require_multi_xpu",
                                  "require_npu", "require_mlu", "require_musa", "require_sdaa",
                                  "require_neuron", "require_tpu"])
def test_devices_accel_does_not_run_on_always_skip(name):
    assert _skipped(getattr(testing, name)(_a_test))


def test_device_decorators_follow_the_test_device(monkeypatch):
    monkeypatch.setattr(testing, "torch_device", "cpu")
    assert not _skipped(testing.require_cpu(_a_test))
    assert _skipped(testing.require_non_cpu(_a_test))
    assert not _skipped(testing.require_non_xpu(_a_test))
    assert not _skipped(testing.require_non_hpu(_a_test))
    monkeypatch.setattr(testing, "torch_device", "cuda")
    monkeypatch.setattr(testing, "device_count", 2)
    assert _skipped(testing.require_cpu(_a_test)) and not _skipped(testing.require_non_cpu(_a_test))
    assert not _skipped(testing.require_multi_device(_a_test))
    assert _skipped(testing.require_single_device(_a_test))


def test_cuda_decorators_ask_cuda(monkeypatch):
    monkeypatch.setattr(testing, "is_torch_xla_available", lambda *a, **k: False)
    for available in (True, False):
        monkeypatch.setattr(testing, "is_cuda_available", lambda: available)
        for decorator in (testing.require_cuda, testing.require_cuda_or_xpu,
                          testing.require_cuda_or_hpu):
            assert _skipped(decorator(_a_test)) is not available


def test_suite_and_version_decorators(monkeypatch):
    monkeypatch.setattr(testing, "is_transformers_available", lambda: True)
    monkeypatch.setattr(testing, "is_datasets_available", lambda: False)
    assert _skipped(testing.require_huggingface_suite(_a_test))
    monkeypatch.setattr(testing, "is_datasets_available", lambda: True)
    assert not _skipped(testing.require_huggingface_suite(_a_test))
    assert not _skipped(testing.require_torch_min_version(_a_test, version="1.0"))
    assert _skipped(testing.require_torch_min_version(version="99.0")(_a_test))
    assert not _skipped(testing.require_fsdp2(_a_test)) is testing.is_torch_version(">=", "2.5")


def test_require_trackers_needs_one_tracker_and_no_comet(monkeypatch):
    for check in ("is_wandb_available", "is_tensorboard_available", "is_trackio_available",
                  "is_swanlab_available", "is_comet_ml_available"):
        monkeypatch.setattr(testing, check, lambda: False)
    assert _skipped(testing.require_trackers(_a_test))
    monkeypatch.setattr(testing, "is_tensorboard_available", lambda: True)
    assert not _skipped(testing.require_trackers(_a_test))
    monkeypatch.setattr(testing, "is_comet_ml_available", lambda: True)
    assert _skipped(testing.require_trackers(_a_test))


@pytest.mark.filterwarnings("ignore::pytest.PytestUnknownMarkWarning")  # pytest-order
def test_skip_slow_and_run_first(monkeypatch):
    assert _skipped(testing.skip(_a_test))
    monkeypatch.setattr(testing, "_run_slow_tests", False)
    assert _skipped(testing.slow(_a_test))
    monkeypatch.setattr(testing, "_run_slow_tests", True)
    assert not _skipped(testing.slow(_a_test))

    def ordered():
        pass

    marks = testing.run_first(ordered).pytestmark
    assert [(m.name, m.args) for m in marks] == [("order", (1,))]


def test_a_skipped_test_case_is_reported_skipped_by_unittest(monkeypatch):
    monkeypatch.setattr(testing, "is_wandb_available", lambda: False)

    @testing.require_wandb
    class Case(unittest.TestCase):
        def test_it(self):
            raise AssertionError("must not run")

    result = unittest.TextTestRunner(stream=open("/dev/null", "w")).run(
        unittest.defaultTestLoader.loadTestsFromTestCase(Case))
    assert result.wasSuccessful() and len(result.skipped) == 1
    assert result.skipped[0][1] == "test requires wandb"


def test_the_reexports_are_accels_own_objects():
    import accel.utils as utils

    assert testing.AcceleratorState is AcceleratorState and testing.GradientState is GradientState
    for name in ("gather", "compare_versions", "is_torch_version", "is_wandb_available",
                 "str_to_bool", "parse_flag_from_env", "check_cuda_fp8_capability"):
        assert getattr(testing, name) is getattr(utils, name)
    from accel.commands import test as test_command

    assert test_command.execute_subprocess_async is testing.execute_subprocess_async
    assert test_command.path_in_accelerate_package is testing.path_in_accelerate_package


def test_the_backend_on_this_machine():
    device, count, allocated = testing.get_backend()
    assert (device, count) == (testing.torch_device, testing.device_count)
    expected = "cuda" if torch.cuda.is_available() else device
    assert device == expected and isinstance(allocated(), int)


# --- launch and subprocess helpers -------------------------------------------------------------

def test_get_launch_command_spells_flags_as_accelerate_does():
    command = testing.get_launch_command(num_processes=2, multi_gpu=True, mixed_precision=None,
                                         fsdp_use_orig_params=False, monitor_interval=0.1)
    assert command[-5:] == ["launch", "--num_processes=2", "--multi_gpu",
                            "--fsdp_use_orig_params=False", "--monitor_interval=0.1"]
    assert command[0].endswith("accel") or command[1:3] == ["-m", "accel_launch"]
    assert testing.DEFAULT_LAUNCH_COMMAND[-2:] == [f"--num_processes={testing.device_count}",
                                                   "--monitor_interval=0.1"]


def test_the_launch_command_runs_a_script_with_accel_launch(tmp_path, capsys):
    script = tmp_path / "tiny.py"
    script.write_text("from accel import PartialState\n"
                      "s = PartialState()\n"
                      "print('tiny', s.num_processes, s.process_index)\n")
    command = testing.get_launch_command(num_processes=1, cpu=True)
    result = testing.execute_subprocess_async([*command, script], timeout=300)
    assert result.returncode == 0 and "tiny 1 0" in result.stdout
    assert "stdout: tiny 1 0" in capsys.readouterr().out  # streamed while it ran


def test_failed_subprocesses_raise_with_their_output():
    with pytest.raises(RuntimeError, match="failed with returncode 3[^$]*boom"):
        testing.execute_subprocess_async(
            [sys.executable, "-c", "import sys; sys.stderr.write('boom'); sys.exit(3)"],
            quiet=True, echo=False)
    out = testing.run_command([sys.executable, "-c", "print('hi')"], return_stdout=True)
    assert out.strip() == "hi"
    with pytest.raises(testing.SubprocessCallException, match="nope"):
        testing.run_command([sys.executable, "-c", "import sys; sys.exit('nope')"])


def test_xdist_worker_and_port(monkeypatch):
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    assert testing.pytest_xdist_worker_id() == 0 and testing.get_torch_dist_unique_port() == 29500
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw3")
    assert testing.pytest_xdist_worker_id() == 3 and testing.get_torch_dist_unique_port() == 29503


def test_path_in_the_package_finds_the_bundled_script():
    path = testing.path_in_accelerate_package("test_utils", "scripts", "test_script.py")
    assert path.is_file() and path.parent.parent.parent == Path(accel.__file__).parent


# --- small helpers and test cases ----------------------------------------------------------------

def test_assert_exception_and_capture_call_output():
    with testing.assert_exception(ValueError, "bad"):
        raise ValueError("a bad value")
    with pytest.raises(AssertionError, match="ran without issue"):
        with testing.assert_exception(ValueError):
            pass
    with pytest.raises(AssertionError, match="Expected exception of type"):
        with testing.assert_exception(ValueError):
            raise KeyError("x")
    assert testing.capture_call_output(print, "a", "b", sep="-") == "a-b\n"


def _run_case(case: type[unittest.TestCase]) -> unittest.TestResult:
    suite = unittest.defaultTestLoader.loadTestsFromTestCase(case)
    return unittest.TextTestRunner(stream=open("/dev/null", "w")).run(suite)


def test_accelerate_test_case_resets_every_state():
    class Case(testing.AccelerateTestCase):
        def test_builds_state(self):
            AcceleratorState(cpu=True)
            GradientState()
            assert PartialState._shared_state and AcceleratorState._shared_state
            assert testing.are_the_same_tensors(torch.arange(3))

    try:
        assert _run_case(Case).wasSuccessful()
        assert not AcceleratorState._shared_state and not PartialState._shared_state
        assert not GradientState._shared_state
    finally:
        AcceleratorState._reset_state(True)
        GradientState._reset_state()


def test_temp_dir_and_mocking_test_cases():
    seen = []

    class Case(testing.TempDirTestCase, testing.MockingTestCase):
        def setUp(self):
            super().setUp()
            self.add_mocks(unittest.mock.patch.object(sys, "flags_for_test", 7, create=True))

        def test_a(self):
            seen.append((sorted(p.name for p in self.tmpdir.iterdir()), sys.flags_for_test))
            (self.tmpdir / "sub").mkdir()
            (self.tmpdir / "f.txt").write_text("x")

        def test_b(self):
            self.test_a()

    assert _run_case(Case).wasSuccessful()
    assert seen == [([], 7), ([], 7)]  # emptied before each test, mock active in each
    assert not hasattr(sys, "flags_for_test") and not Case.tmpdir.exists()


# --- training ------------------------------------------------------------------------------------

# Made with the real Accelerate 1.15.0 (pip install --no-deps --target /tmp/acc accelerate==1.15.0;
# PYTHONPATH=/tmp/acc python -c "from accelerate.test_utils.training import RegressionDataset;
# d = RegressionDataset(length=96, seed=42); print(d.x[:4].tolist(), d.y[:4].tolist(),
# float(d.x.sum()), float(d.y.sum()))", and the same for a=1, b=1, length=8, seed=0).
_SEED42_X = [0.304717093706131, -1.039984107017517, 0.7504512071609497, 0.9405646920204163]
_SEED42_Y = [3.4771642684936523, 0.8203071355819702, 4.540879726409912, 4.790581226348877]
_SEED42_SUMS = (-2.201310157775879, 283.2928466796875)
_SEED0_A1B1_Y = [1.055356740951538, 0.7413529753684998, 1.5780951976776123, 1.1090327501296997,
                 0.2318275421857834, 1.339715838432312, 2.1794087886810303, 1.8738542795181274]


def test_the_regression_dataset_draws_accelerates_numbers():
    data = training.RegressionDataset(length=96, seed=42)
    assert len(data) == 96 and data.x.dtype == np.float32 and data.y.dtype == np.float32
    assert data.x[:4].tolist() == _SEED42_X and data.y[:4].tolist() == _SEED42_Y
    assert (float(data.x.sum()), float(data.y.sum())) == _SEED42_SUMS
    small = training.RegressionDataset(a=1, b=1, length=8, seed=0)
    assert small.y.tolist() == _SEED0_A1B1_Y
    assert set(small[3]) == {"x", "y"} and small[3]["y"] == small.y[3]


def test_the_regression_model(capsys):
    model = training.RegressionModel(a=1, b=1)
    assert [n for n, _ in model.named_parameters()] == ["a", "b"]
    assert model.a.dtype == torch.float32 and model.a.shape == ()
    assert model(torch.tensor([2.0, 3.0])).tolist() == [3.0, 4.0]
    model(torch.tensor([1.0]))
    assert capsys.readouterr().out == ("Model dtype: torch.float32, torch.float32. "
                                       "Input dtype: torch.float32\n")  # first batch only
    assert training.DistributedType is accel.DistributedType


@pytest.mark.parametrize("helper", ["mocked_dataloaders",
                                    "mocked_dataloaders_for_autoregressive_models"])
def test_the_mocked_dataloaders_name_the_missing_package(helper, monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # import datasets -> ImportError
    with pytest.raises(MissingDependencyError, match="'datasets'.*pip install datasets"):
        getattr(training, helper)(None)


# --- examples ------------------------------------------------------------------------------------

_TEMPLATE = '''\
    def training_function(config, args):
        accelerator = Accelerator()
        train_dataloader, eval_dataloader = get_dataloaders(accelerator, batch_size)
        model.train()

    def main():
        parser = argparse.ArgumentParser()
        args = parser.parse_args()

    if __name__ == "__main__":
        main()
'''
_FEATURE = '''\
    def training_function(config, args):
        # New Code #
        accelerator = Accelerator()
        tracker = start_tracking()
        # For testing only
        if os.environ.get("TESTING_MOCKED_DATALOADERS", None) == "1":
            config["num_epochs"] = 2
        train_dataloader, eval_dataloader = get_dataloaders(accelerator, batch_size)
        model.train()
        tracker.log(loss)

        end_of_function()
    def main():
        parser = argparse.ArgumentParser()
        parser.add_argument("--with_tracking")
        args = parser.parse_args()

    if __name__ == "__main__":
        main()
'''
_COMPLETE = _FEATURE.replace("        tracker.log(loss)\n", "").replace(
    '        parser.add_argument("--with_tracking")\n', "")


def test_the_example_helpers(tmp_path, monkeypatch):
    lines = textwrap.dedent(_FEATURE).splitlines(keepends=True)
    body = examples.get_function_contents_by_name(lines, "training_function")
    assert body[0].startswith("def training_function") and body[-1] == "    end_of_function()\n"
    assert examples.get_function_contents_by_name(lines, "main")[-1] == "\n"
    with pytest.raises(ValueError, match="choose either 'main' or 'training_function'"):
        examples.get_function_contents_by_name(lines, "other")
    assert examples.clean_lines(["# c\n", "  # c\n", "\n", "x = 1\n", "  \n"]) == ["x = 1\n",
                                                                                  "  \n"]
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "nlp_example.py").write_text(textwrap.dedent(_TEMPLATE))
    feature, complete = tmp_path / "feature.py", tmp_path / "complete.py"
    feature.write_text(textwrap.dedent(_FEATURE))
    complete.write_text(textwrap.dedent(_COMPLETE))
    monkeypatch.chdir(tmp_path)
    # the complete script lacks the feature's tracker.log line; the mocked-dataloader lines
    # and the template's own lines never count; the last line of the section is not looked at
    assert examples.compare_against_test(complete, feature, False) == ["    tracker.log(loss)\n"]
    assert examples.compare_against_test(complete, feature, True) == [
        '    parser.add_argument("--with_tracking")\n']
    assert examples.compare_against_test(feature, feature, False) == []
