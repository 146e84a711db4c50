"""The per-backend subpackages (deepspeed/, fsdp/, mesh/): each re-exports the names of the
old module of its name, lazily, and the old flat module paths are gone (no shims)."""

from __future__ import annotations

import importlib
import importlib.util
import subprocess
import sys

import accel_parallel
import pytest

PACKAGES = {"accel_parallel.deepspeed": "accel_parallel.deepspeed.strategy",
            "accel_parallel.fsdp": "accel_parallel.fsdp.strategy",
            "accel_parallel.mesh": "accel_parallel.mesh.device_mesh"}


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_a_backend_package_re_exports_its_modules_names(package):
    pkg = importlib.import_module(package)
    source = importlib.import_module(PACKAGES[package])
    assert pkg.__all__ and set(pkg.__all__) <= set(source.__all__)
    for name in pkg.__all__:
        assert getattr(pkg, name) is getattr(source, name)
    with pytest.raises(AttributeError, match=f"module '{package}' has no attribute 'nope'"):
        pkg.nope  # noqa: B018


def test_the_old_documented_import_still_works():
    from accel_parallel.deepspeed import DeepSpeedStrategy
    from accel_parallel.fsdp import FSDP2Strategy

    assert DeepSpeedStrategy is accel_parallel.DeepSpeedStrategy
    assert FSDP2Strategy is accel_parallel.FSDP2Strategy


@pytest.mark.parametrize("old", ["deepspeed_plugin", "deepspeed_config", "fsdp_plugin",
                                 "fsdp_sharding", "nd", "parallelism_config", "tp_plan",
                                 "ulysses", "sequence_parallel"])
def test_the_old_flat_modules_are_gone(old):
    assert importlib.util.find_spec(f"accel_parallel.{old}") is None


def test_a_deepspeed_module_does_not_load_the_strategy_and_accel_loads_neither():
    # the facade where it is installed (this package is also tested alone, without it)
    first = "accel" if importlib.util.find_spec("accel") is not None else "accel_parallel"
    code = (f"import sys, {first}; "
            "before = sorted(m for m in sys.modules if m.startswith('accel_parallel.deepspeed')); "
            "import accel_parallel.deepspeed.plugin; "
            "print(before, 'accel_parallel.deepspeed.strategy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[] False"


def test_every_package_name_loads_from_the_module_that_defines_it():
    """``accel_parallel``'s names are lazy (PEP 562): each listed name resolves, to the very
    object of its module, and no name is listed twice or left out of ``__all__``."""
    names = [n for names in accel_parallel._MODULES.values() for n in names]
    assert len(names) == len(set(names)) and set(names) == set(accel_parallel.__all__)
    for module, exported in accel_parallel._MODULES.items():
        source = importlib.import_module(module)
        for name in exported:
            assert getattr(accel_parallel, name) is getattr(source, name), (module, name)
    with pytest.raises(AttributeError, match="module 'accel_parallel' has no attribute 'nope'"):
        accel_parallel.nope  # noqa: B018


def test_import_accel_parallel_loads_no_backend_module():
    code = ("import sys, accel_parallel; "
            "print(sorted(m for m in sys.modules if m.startswith('accel_parallel.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "['accel_parallel._lazy']"
