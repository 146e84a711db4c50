"""``accel_precision``'s names load on first use (PEP 562): ``import accel`` pays for the
Precision interface, not for the AMP, torchao and Transformer Engine modules."""

from __future__ import annotations

import importlib
import subprocess
import sys

import accel_precision
import pytest


def test_every_name_resolves_to_the_object_of_its_module():
    names = [n for names in accel_precision._MODULES.values() for n in names]
    assert len(names) == len(set(names)) and set(names) == set(accel_precision.__all__)
    for module, exported in accel_precision._MODULES.items():
        source = importlib.import_module(module)
        for name in exported:
            assert getattr(accel_precision, name) is getattr(source, name), (module, name)
    with pytest.raises(AttributeError, match="module 'accel_precision' has no attribute 'x'"):
        accel_precision.x  # noqa: B018


def test_importing_the_interface_loads_no_backend_module():
    code = ("import sys; from accel_precision import Precision, NoPrecision, AutocastKwargs; "
            "print(sorted(m for m in sys.modules if m.startswith('accel_precision.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "['accel_precision.base', 'accel_precision.kwargs']"
