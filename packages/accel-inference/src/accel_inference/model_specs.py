"""Build the model ``accel estimate-memory`` sizes, without downloading anything.

A spec is ``package.module:factory`` or ``path/to/file.py:factory`` (a callable returning an
``nn.Module``), a local folder with a transformers ``config.json``, or (with
``--library_name timm``) a timm architecture name. A Hub name would need the network: it is
refused with a message saying what to pass instead.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

from accel_state.errors import ConfigurationError, MissingDependencyError
from torch import nn

__all__ = ["build_model", "resolve_factory"]


def resolve_factory(spec: str) -> Any:
    """The callable named by ``module:factory`` or ``file.py:factory``."""
    target, _, attribute = spec.rpartition(":")
    if not target or not attribute:
        raise ConfigurationError(f"{spec!r} is not 'module:factory'.")
    if target.endswith(".py"):
        path = Path(target)
        if not path.is_file():
            raise ConfigurationError(f"No file {target!r} (from the model spec {spec!r}).")
        name = f"_accel_estimate_{abs(hash(str(path.resolve())))}"
        loader = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(loader)  # type: ignore[arg-type]
        sys.modules[name] = module
        loader.loader.exec_module(module)  # type: ignore[union-attr]
    else:
        try:
            module = importlib.import_module(target)
        except ImportError as error:
            raise ConfigurationError(f"Cannot import {target!r} from the model spec {spec!r}: "
                                     f"{error}.") from None
    factory = getattr(module, attribute, None)
    if not callable(factory):
        raise ConfigurationError(f"{target!r} has no callable {attribute!r} (model spec "
                                 f"{spec!r}).")
    return factory


def _transformers(folder: str | None, name: str, trust_remote_code: bool) -> nn.Module:
    try:
        import transformers
    except ImportError:
        raise MissingDependencyError(
            "transformers", feature=f"sizing {name!r} from its config (or pass a "
            "'module:factory' that builds the model)") from None
    try:
        config = transformers.AutoConfig.from_pretrained(folder or name,
                                                         trust_remote_code=trust_remote_code)
    except OSError as error:
        raise ConfigurationError(
            f"Cannot get the config of {name!r} ({error}). accel estimate-memory never "
            "downloads weights; without network access pass a local folder holding its "
            "config.json, or a 'module:factory'.") from None
    return transformers.AutoModel.from_config(config, trust_remote_code=trust_remote_code)


def _timm(name: str) -> nn.Module:
    try:
        import timm
    except ImportError:
        raise MissingDependencyError("timm", feature=f"building {name!r}") from None
    return timm.create_model(name, pretrained=False)


def build_model(spec: str, library_name: str | None = None, trust_remote_code: bool = False,
                empty: bool = True) -> nn.Module:
    """The model named by ``spec``, built on ``meta`` when ``empty`` (no memory used)."""
    from accel_inference.empty_init import init_empty_weights

    if library_name not in (None, "transformers", "timm"):
        raise ConfigurationError(f"--library_name {library_name!r}: use 'transformers' or "
                                 "'timm' (or pass a 'module:factory').")
    is_folder = os.path.isdir(spec)
    is_factory = ":" in spec and not is_folder and library_name is None
    if not (is_factory or is_folder or library_name == "timm"):
        if library_name is None and "/" not in spec:
            raise ConfigurationError(f"Cannot tell what {spec!r} is: pass 'module:factory', "
                                     "'file.py:factory', a folder with a config.json, or a "
                                     "name with --library_name transformers|timm.")
    context = init_empty_weights() if empty else _nullcontext()
    with context:
        if is_factory:
            model = resolve_factory(spec)()
        elif library_name == "timm":
            model = _timm(spec)
        else:
            model = _transformers(spec if is_folder else None, spec, trust_remote_code)
    if not isinstance(model, nn.Module):
        raise ConfigurationError(f"{spec!r} returned {type(model).__name__}, not an "
                                 "nn.Module.")
    return model


class _nullcontext:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None
