"""The test scripts accel bundles at Accelerate's paths (``accel/test_utils/scripts``), which
Accelerate's own suite launches (found with ``path_in_accelerate_package``), pass on 2 CPU
processes, and on one where Accelerate's suite runs them on one.

Their 2-process runs are in the launch shared with other check scripts (conftest's
``shared_launch``: each script as ``__main__``, its own output read back; test_script's
launch is `accel test`'s, in test_launch_elastic.py); the one-process runs of test_sync,
test_ops and test_cli run in this process (test_script's is `accel test`'s, in test_selftest_configs.py).
A script that fails exits non-zero, which these tests check along with what it printed.
"""

from __future__ import annotations

import pytest

from accel.test_utils import path_in_accelerate_package

pytestmark = pytest.mark.multiprocess


def _script(name: str):
    path = path_in_accelerate_package("test_utils", "scripts", name)
    assert path.is_file(), path
    return path


#: script -> lines its main process prints when every check ran
EXPECTED = {
    "test_sync.py": [
        "**Test Distributed `no_sync` context manager with multiple forwards**",
        "`split_batches=True` and `dispatch_batches=True` and `sync_each_batch=True`**",
        "`split_batches=False` and `dispatch_batches=False` and `sync_each_batch=True`**"],
    "test_ops.py": ["testing op_checker", "testing sending tensors across devices"],
    "test_distributed_data_loop.py": [
        "Test join with non DDP distributed raises warning",
        "Test a stateful dataloader resumes from its state_dict and from save_state"],
}
# test_script.py's 2-process launch is `accel test`'s (test_launch_elastic.py), which checks
# the same lines; its 1-process runs are in test_selftest_configs.py


@pytest.mark.parametrize("name", [
    pytest.param(name, marks=pytest.mark.shared_launch(str(_script(name)))) for name in EXPECTED])
def test_a_bundled_script_passes_on_two_processes(name, shared_launch, explain):
    proc = shared_launch
    assert proc.returncode == 0, explain(proc, tail=6000)
    for line in EXPECTED[name]:
        assert line in proc.stdout, f"{line!r} not printed\n" + explain(proc, tail=2000)


@pytest.mark.parametrize("name", ["test_sync.py", "test_ops.py", "test_cli.py"])
def test_a_bundled_script_passes_on_one_process(name, run_here, capsys):
    run_here(_script(name))
    out = capsys.readouterr().out
    if name == "test_cli.py":  # what Accelerate's CLI tests launch: the devices it sees
        import torch

        assert f"Successfully ran on {torch.cuda.device_count()} GPUs" in out
    elif name == "test_sync.py":
        assert "**Test NOOP `no_sync` context manager**" in out
        assert "no_sync` context manager with multiple forwards" not in out  # N processes only
    else:
        assert "testing sending tensors across devices" in out


def test_a_broken_behaviour_fails_its_check(monkeypatch):
    """The checks are real: ``reduce`` answering zeros fails the reduce check, naming it."""
    from accel_state import PartialState

    from accel.test_utils.scripts import test_ops

    monkeypatch.setattr(test_ops, "reduce", lambda tensor, reduction: tensor * 0)
    with pytest.raises(AssertionError, match="reduce 'sum'"):
        test_ops.check_reduce(PartialState(cpu=True))


def test_accelerates_import_names_for_the_scripts():
    """``accelerate.test_utils`` offers the scripts as modules (its CPU tests call
    ``debug_launcher(test_script.main)``)."""
    import accel.test_utils as test_utils

    for name in ("test_script", "test_sync", "test_ops"):
        assert callable(getattr(test_utils, name).main), name
