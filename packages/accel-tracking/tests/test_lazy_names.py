"""``accel_tracking``'s names load on first use (PEP 562): ``import accel`` loads the
registry and the group, not the built-in trackers' modules."""

from __future__ import annotations

import importlib
import subprocess
import sys

import accel_tracking
import pytest


def test_every_name_resolves_to_the_object_of_its_module():
    names = [n for names in accel_tracking._MODULES.values() for n in names]
    assert len(names) == len(set(names))
    assert set(names) == set(accel_tracking.__all__) - {"__version__"}
    for module, exported in accel_tracking._MODULES.items():
        source = importlib.import_module(module)
        for name in exported:
            assert getattr(accel_tracking, name) is getattr(source, name), (module, name)
    with pytest.raises(AttributeError, match="module 'accel_tracking' has no attribute 'x'"):
        accel_tracking.x  # noqa: B018


def test_the_group_and_registry_load_no_tracker_module():
    code = ("import sys; from accel_tracking import TRACKERS, TrackerGroup, build_trackers; "
            "print(sorted(m for m in sys.modules if m.startswith('accel_tracking.trackers')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"
