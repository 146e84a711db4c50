"""``accel_data``'s names load on first use (PEP 562): ``import accel`` loads the
configuration class, not the loaders, samplers and dispatcher."""

from __future__ import annotations

import importlib
import subprocess
import sys

import accel_data
import pytest


def test_every_name_resolves_to_the_object_of_its_module():
    names = [n for names in accel_data._MODULES.values() for n in names]
    assert len(names) == len(set(names)) and set(names) == set(accel_data.__all__)
    for module, exported in accel_data._MODULES.items():
        source = importlib.import_module(module)
        for name in exported:
            assert getattr(accel_data, name) is getattr(source, name), (module, name)
    with pytest.raises(AttributeError, match="module 'accel_data' has no attribute 'x'"):
        accel_data.x  # noqa: B018


def test_the_configuration_loads_no_loader_module():
    code = ("import sys; from accel_data import DataLoaderConfiguration; "
            "print(sorted(m for m in sys.modules if m.startswith('accel_data.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "['accel_data.config']"
