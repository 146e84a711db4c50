"""accel-parallel's tests: a fresh one-process CPU ``PartialState`` per test that asks for
``state`` (strategies read the process state; it is reset before and after)."""

from __future__ import annotations

import pytest
from accel_state import PartialState


@pytest.fixture
def state():
    PartialState._reset_state()
    yield PartialState(cpu=True)
    PartialState._reset_state()
