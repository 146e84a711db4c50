"""Accelerate's ``accelerate.utils.versions`` path: accel-state's version comparisons."""

from __future__ import annotations

from importlib.metadata import version as _version
from typing import Any

from accel_state.imports import compare_versions, is_torch_version

from accel._module_compat import forward_to
from accel.utils.constants import STR_OPERATION_TO_FUNC


def _parsed_torch_version() -> Any:
    from packaging.version import parse  # packaging comes with accel-state

    return parse(_version("torch"))


#: the installed torch's version, parsed (Accelerate's module attribute)
torch_version = _parsed_torch_version()

__all__ = ["STR_OPERATION_TO_FUNC", "compare_versions", "is_torch_version", "torch_version"]


# Accelerate's incidental names (helpers its module happened to import), on first use
__getattr__ = forward_to(__name__, "accel.utils")
