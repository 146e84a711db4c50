"""Registry lookups, lazy optional imports and the error hierarchy."""

from __future__ import annotations

import pytest
from accel_state import (
    AccelError,
    ConfigurationError,
    DistributedOperationException,
    InitProcessGroupKwargs,
    MissingDependencyError,
    Registry,
)
from accel_state.enums import DistributedType
from accel_state.imports import (
    compare_versions,
    is_package_available,
    is_torch_version,
    is_wandb_available,
    require,
)


def test_registry_register_get_and_unknown_name_suggestion():
    reg: Registry[int] = Registry("accel.test-nothing-here", "widget")
    reg.register("alpha", 1)
    reg.register("beta", 2)
    assert reg.get("ALPHA") == 1 and "beta" in reg and list(reg) == ["alpha", "beta"]
    with pytest.raises(ConfigurationError, match=r"Unknown widget 'alpah'\. Did you mean 'alpha'"):
        reg.get("alpah")
    with pytest.raises(ConfigurationError, match="already registered"):
        reg.register("alpha", 3)
    reg.register("alpha", 3, override=True)
    assert reg.get("alpha") == 3


def test_registry_loads_entry_points():
    reg: Registry[object] = Registry("console_scripts", "script")
    # pytest installs a console script entry point named "pytest" in this environment
    assert "pytest" in reg
    assert callable(reg.get("pytest"))


def test_missing_dependency_names_install_line():
    with pytest.raises(MissingDependencyError, match=r'pip install "accel\[fancy\]"') as info:
        require("surely_not_installed_pkg", extra="fancy", feature="fancy things")
    assert isinstance(info.value, ImportError) and "fancy things" in str(info.value)
    assert require("json").dumps([1]) == "[1]"


def test_availability_probes_are_cheap_and_correct():
    import sys

    assert is_package_available("torch")
    assert not is_package_available("surely_not_installed_pkg")
    assert is_wandb_available() == ("wandb" in {m.split(".")[0] for m in sys.modules} or
                                    is_package_available("wandb"))
    assert "wandb" not in sys.modules  # probing must not import it


def test_version_comparisons():
    assert is_torch_version(">=", "2.0")
    assert compare_versions("1.2.3", "<", "1.10")
    with pytest.raises(ConfigurationError, match="Unknown comparison"):
        compare_versions("1.0", "=>", "1.0")


def test_error_hierarchy_subclasses_builtins():
    assert issubclass(ConfigurationError, ValueError) and issubclass(ConfigurationError, AccelError)
    assert issubclass(MissingDependencyError, ImportError)
    assert issubclass(DistributedOperationException, RuntimeError)


def test_enums_and_kwargs_handler():
    assert "MULTI_CPU" in DistributedType and "NOPE" not in DistributedType
    assert DistributedType.MULTI_CPU == "MULTI_CPU" == DistributedType.MULTI_CPU.value
    assert "NO" in DistributedType.list()
    handler = InitProcessGroupKwargs(timeout=30)
    assert handler.timeout.total_seconds() == 30
    assert handler.to_kwargs() == {"timeout": handler.timeout}
    assert InitProcessGroupKwargs().to_kwargs() == {}
    with pytest.raises(ConfigurationError, match="positive"):
        InitProcessGroupKwargs(timeout=0)


def test_distributed_type_prints_like_accelerate():
    # Accelerate 1.15: DistributedType is a plain (str, Enum), so str() gives its class name
    # (and so do format() and f-strings from Python 3.11), and it still equals its value
    import sys

    from accel_state import ComputeEnvironment, SageMakerDistributedType

    member = DistributedType.NO
    assert str(member) == "DistributedType.NO"
    if sys.version_info >= (3, 11):
        assert format(member) == f"{member}" == "{}".format(member) == "DistributedType.NO"
        assert f"{DistributedType.MULTI_GPU:>30}" == "     DistributedType.MULTI_GPU"
    assert member == "NO" and member.value == "NO" and hash(member) == hash("NO")
    assert repr(member) == "<DistributedType.NO: 'NO'>"
    assert str(ComputeEnvironment.LOCAL_MACHINE) == "ComputeEnvironment.LOCAL_MACHINE"
    assert str(SageMakerDistributedType.NO) == "SageMakerDistributedType.NO"
    assert DistributedType(member.value) is member and DistributedType.list()[0] == "NO"
