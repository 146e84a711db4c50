"""Base test cases and small assertion helpers of ``accel.test_utils.testing``.

Kept apart from the decorators so each module stays short; ``testing`` re-exports them.
"""

from __future__ import annotations

import io
import re
import shutil
import sys
import tempfile
import unittest
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import torch
from accel_state.env import EnvVar

from accel.state import AcceleratorState, GradientState
from accel.utils import gather

__all__ = [
    "AccelerateTestCase", "MockingTestCase", "TempDirTestCase", "are_the_same_tensors",
    "assert_exception", "capture_call_output", "get_torch_dist_unique_port",
    "path_in_accelerate_package", "pytest_xdist_worker_id",
]

_XDIST_WORKER = EnvVar("PYTEST_XDIST_WORKER", "pytest-xdist's worker id (gw0, gw1, ...), set "
                       "by pytest -n N; test_utils offsets ports by it.")


class TempDirTestCase(unittest.TestCase):
    """One temporary folder (``self.tmpdir``) for the whole class, emptied before each test
    (``clear_on_setup``) and removed after the class: for APIs that want a fixed folder."""

    clear_on_setup = True
    tmpdir: Path

    @classmethod
    def setUpClass(cls) -> None:
        super().setUpClass()
        cls.tmpdir = Path(tempfile.mkdtemp())

    @classmethod
    def tearDownClass(cls) -> None:
        shutil.rmtree(cls.tmpdir, ignore_errors=True)
        super().tearDownClass()

    def setUp(self) -> None:
        super().setUp()
        if self.clear_on_setup:
            for path in list(self.tmpdir.iterdir()):
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                else:
                    path.unlink()


class AccelerateTestCase(unittest.TestCase):
    """Forgets the process-wide states after every test, so one test's Accelerator (its
    device, plugins, dataloader references) never leaks into the next."""

    def tearDown(self) -> None:
        super().tearDown()
        AcceleratorState._reset_state(True)  # also PartialState
        GradientState._reset_state()


class MockingTestCase(unittest.TestCase):
    """Mocks that need information known only after ``setUpClass``: call
    ``self.add_mocks(mock.patch.dict(os.environ, {...}))`` at the end of ``setUp``; each is
    started now and stopped when the test ends."""

    def add_mocks(self, mocks: Any | list[Any]) -> None:
        self.mocks = list(mocks) if isinstance(mocks, (tuple, list)) else [mocks]
        for patcher in self.mocks:
            patcher.start()
            self.addCleanup(patcher.stop)


def are_the_same_tensors(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` is equal on every process (gathers it from all of them)."""
    state = AcceleratorState()
    mine = tensor[None].clone().to(state.device)
    everyone = gather(mine).cpu()
    reference = mine[0].cpu()
    return all(torch.equal(everyone[i], reference) for i in range(everyone.shape[0]))


def pytest_xdist_worker_id() -> int:
    """This pytest-xdist worker's number (``gw3`` -> 3); 0 without xdist."""
    worker = _XDIST_WORKER.get("gw0") or "gw0"
    return int(re.sub(r"^gw", "", worker))


def get_torch_dist_unique_port() -> int:
    """A ``--main_process_port`` for a launched test: 29500 plus the xdist worker number, so
    concurrent workers never ask for the same port."""
    return 29500 + pytest_xdist_worker_id()


def path_in_accelerate_package(*components: str) -> Path:
    """A path inside the installed ``accel`` package (Accelerate's name: its tests find the
    bundled scripts with ``path_in_accelerate_package("test_utils", "scripts", ...)``)."""
    import accel

    return Path(accel.__file__).parent.joinpath(*components)


@contextmanager
def assert_exception(exception_class: type[BaseException],
                     msg: str | None = None) -> Iterator[None]:
    """The block must raise ``exception_class`` (with ``msg`` in its message, when given)."""
    try:
        yield
    except Exception as exc:  # noqa: BLE001 - the type is checked right below
        assert isinstance(exc, exception_class), (
            f"Expected exception of type {exception_class} but got {type(exc)}")
        if msg is not None:
            assert msg in str(exc), f"Expected message '{msg}' to be in exception but got " \
                f"'{exc}'"
        return
    raise AssertionError(f"Expected exception of type {exception_class} but ran without issue.")


def capture_call_output(func: Callable[..., Any], *args: Any, **kwargs: Any) -> str:
    """What ``func(*args, **kwargs)`` prints to stdout, as a string (exceptions propagate)."""
    captured = io.StringIO()
    with mock.patch.object(sys, "stdout", captured):
        func(*args, **kwargs)
    return captured.getvalue()
