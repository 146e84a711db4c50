"""accel's `accelerate` shim: the import name maps to accel's modules, the metadata says
what it is, and it is inert until imported and refuses to sit next to a real Accelerate."""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import pkgutil
import subprocess
import sys
import textwrap
from pathlib import Path
from unittest import mock

import accel
import accelerate
import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

SHIM_VERSION = "1.15.0+accel.1"


def _run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=120, env={**os.environ, **env})


def _accel_modules() -> list[str]:
    """Every public module under ``accel`` (the tree Accelerate's paths map onto)."""
    names = ["accel"]
    for info in pkgutil.walk_packages(accel.__path__, "accel."):
        if not any(part.startswith("_") for part in info.name.split(".")):
            names.append(info.name)
    return names


def test_every_accel_module_is_the_same_object_under_accelerate() -> None:
    modules = _accel_modules()
    assert {"accel.utils.modeling", "accel.state", "accel.hooks", "accel.data_loader",
            "accel.commands.launch"} <= set(modules)
    for name in modules[1:]:
        alias = "accelerate" + name[len("accel"):]
        assert importlib.import_module(alias) is importlib.import_module(name), alias
        assert sys.modules[alias] is sys.modules[name]


def test_importing_a_submodule_by_its_alias_leaves_the_parents_names_alone() -> None:
    # accel.utils binds the name ``tqdm`` to the function from its submodule of that name;
    # importing ``accelerate.utils.tqdm`` must not rebind it to the submodule
    done = _run("""
        import accel.utils, accel_tracking
        import accelerate.utils.tqdm
        from accelerate.utils import tqdm
        assert accel.utils.tqdm is accel_tracking.tqdm is tqdm, accel.utils.tqdm
        assert accelerate.utils.tqdm is accel_tracking.tqdm
        import accelerate.utils.modeling as modeling, accel.utils.modeling
        assert modeling is accel.utils.modeling
    """)
    assert done.returncode == 0, done.stderr


def test_root_names_are_accels_and_only_the_version_is_its_own() -> None:
    assert accelerate.Accelerator is accel.Accelerator
    assert accelerate.PartialState is accel.PartialState
    assert accelerate.utils is accel.utils  # a submodule, reachable as an attribute
    assert accelerate.__all__ == accel.__all__
    assert accelerate.__version__ == SHIM_VERSION != accel.__version__
    namespace: dict[str, object] = {}
    exec("from accelerate import *", namespace)
    assert namespace["Accelerator"] is accel.Accelerator
    assert namespace["__version__"] == SHIM_VERSION
    assert "Accelerator" in dir(accelerate)


def test_patching_an_accelerate_path_patches_accel() -> None:
    sentinel = object()
    with mock.patch("accelerate.utils.set_seed", sentinel):
        assert accel.utils.set_seed is sentinel
    assert accel.utils.set_seed is not sentinel
    with mock.patch("accelerate.state.PartialState", sentinel):
        assert importlib.import_module("accel.state").PartialState is sentinel


def test_what_accel_lacks_is_missing_as_under_accelerate() -> None:
    with pytest.raises(ModuleNotFoundError) as missing:
        importlib.import_module("accelerate.no_such_module")
    assert missing.value.name == "accelerate.no_such_module"
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("accelerate.no_such_module.child")
    with pytest.raises(AttributeError, match="no_such_name"):
        accelerate.no_such_name  # noqa: B018
    with pytest.raises(AttributeError):
        accelerate._private_probe  # noqa: B018
    assert not hasattr(accelerate, "__wrapped__")  # dunder probes stay misses


def test_version_metadata_says_what_it_is() -> None:
    meta = importlib.metadata.metadata("accelerate")
    assert importlib.metadata.version("accelerate") == SHIM_VERSION == accelerate.__version__
    assert meta["Summary"].startswith("accel's compatibility shim (not Hugging Face Accelerate)")
    assert [Requirement(r).name for r in meta.get_all("Requires-Dist")] == ["accel"]
    version = Version(SHIM_VERSION)
    assert version.public == "1.15.0" and version.local == "accel.1"
    # Requirements without a local label ignore it (PEP 440): the ranges libraries declare
    # and the version branches they take (`>= 1.12.0`) all accept the shim.
    for spec in (">=0.21.0", ">=1.4.0", ">=1.1.0", "==1.15.0", "~=1.15"):
        assert version in SpecifierSet(spec), spec
    assert version >= Version("1.15.0")


def test_the_accelerate_command_is_accels_command_line() -> None:
    scripts = {ep.name: ep for ep in importlib.metadata.distribution("accelerate").entry_points
               if ep.group == "console_scripts"}
    from accel_launch.cli import main

    assert scripts["accelerate"].load() is main


def test_inert_until_imported_then_a_bare_import_reaches_nested_names() -> None:
    """Installed but not imported, it changes nothing: accel never loads it. After a bare
    ``import accelerate``, nested names resolve as they do under Accelerate."""
    result = _run("""
        import sys
        import accel, accel.utils, accel_state
        from accel import Accelerator
        assert "accelerate" not in sys.modules, "import accel loaded the shim"
        assert not [f for f in sys.meta_path if type(f).__module__ == "accelerate"]
        import accelerate
        assert [f for f in sys.meta_path if type(f).__module__ == "accelerate"]
        assert accelerate.utils.gather is accel_state.gather
        assert accelerate.utils.modeling.infer_auto_device_map is accelerate.infer_auto_device_map
        from accelerate.utils.versions import is_torch_version
        print("OK")
    """)
    assert result.returncode == 0 and "OK" in result.stdout, result.stderr[-3000:]


def test_refuses_to_run_next_to_a_real_accelerate(tmp_path: Path) -> None:
    """A real Accelerate's metadata on the path (e.g. in another site-packages) and the
    shim's files being imported: the import fails, naming both and the fix."""
    info = tmp_path / "accelerate-1.15.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: accelerate\nVersion: 1.15.0\n"
                                   "Summary: Accelerate\n")
    path = os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])
    result = _run("import accelerate", PYTHONPATH=path)
    assert result.returncode != 0
    assert "ImportError" in result.stderr
    assert "Hugging Face Accelerate (1.15.0 in " + str(tmp_path) in result.stderr
    assert "pip uninstall -y accelerate" in result.stderr
    assert _run("import accelerate").returncode == 0  # and nothing is left behind
