"""accel_tracking.tqdm: a bar on the local main process only."""

from __future__ import annotations

import io

import pytest
from accel_state.errors import ConfigurationError
from accel_tracking import tqdm


def test_main_process_shows_the_bar_and_it_iterates():
    out = io.StringIO()
    bar = tqdm(range(3), file=out, desc="steps")
    assert not bar.disable
    assert list(bar) == [0, 1, 2]
    assert "steps" in out.getvalue() and "3/3" in out.getvalue()


def test_disable_and_every_process_options():
    assert tqdm(range(2), disable=True).disable
    assert not tqdm(range(2), main_process_only=False, file=io.StringIO()).disable


def test_a_bool_first_argument_is_refused():
    with pytest.raises(ConfigurationError, match="main_process_only"):
        tqdm(True, range(3))

