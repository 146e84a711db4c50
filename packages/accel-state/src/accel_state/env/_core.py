"""The environment contract's machinery: :class:`EnvVar`, the registry of declared variables
(:data:`ENV_VARS`) and Accelerate's environment helpers.

The variables themselves are declared in the sibling modules of this package, grouped by
who reads them (``_runtime``, ``_services``, ``_parallel``); ``accel_state.env`` re-exports
them all, and this package is the only code of accel that reads ``os.environ``.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from accel_state.errors import ConfigurationError

#: Accelerate's logger name for these helpers (user code filters and tests look it up)
_environment_logger = logging.getLogger("accel.utils.environment")
_ENV_FILE_FORBIDDEN = (" ", ";", "<", ">", "\n")

__all__ = [
    "EnvVar",
    "ENV_VARS",
    "str_to_bool",
    "parse_flag_from_env",
    "parse_choice_from_env",
    "get_int_from_env",
    "read",
    "snapshot",
    "patch_environment",
    "clear_environment",
    "purge_accelerate_environment",
    "convert_dict_to_env_variables",
]

_TRUE = {"1", "y", "yes", "t", "true", "on"}
_FALSE = {"0", "n", "no", "f", "false", "off", ""}


def str_to_bool(value: str, to_bool: bool = False) -> int | bool:
    """Accelerate's ``str_to_bool``: 1/0 (or True/False with ``to_bool``) for yes/no strings."""
    low = value.strip().lower()
    if low in _TRUE:
        result = 1
    elif low in _FALSE:
        result = 0
    else:
        raise ConfigurationError(
            f"Invalid truth value {value!r}: use one of 1/0, true/false, yes/no, on/off."
        )
    return bool(result) if to_bool else result


@dataclass(frozen=True)
class EnvVar:
    """One environment variable of the contract.

    ``name`` is the canonical spelling; ``aliases`` are read when ``name`` is unset
    (Accelerate's ``ACCELERATE_*`` names, torchrun's, SLURM's, MPI's, ...).
    """

    name: str
    doc: str
    aliases: tuple[str, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)

    def raw(self) -> tuple[str, str] | None:
        """``(spelling found, value)`` of the first set spelling, or ``None``."""
        for key in self.names:
            value = os.environ.get(key)
            if value is not None:
                return key, value
        return None

    def get(self, default: str | None = None) -> str | None:
        found = self.raw()
        return default if found is None else found[1]

    def is_set(self) -> bool:
        return self.raw() is not None

    def get_bool(self, default: bool = False) -> bool:
        found = self.raw()
        if found is None:
            return default
        key, value = found
        try:
            return bool(str_to_bool(value))
        except ConfigurationError:
            raise ConfigurationError(
                f"Environment variable {key}={value!r} is not a boolean: set it to 1 or 0."
            ) from None

    def get_int(self, default: int | None = None) -> int | None:
        found = self.raw()
        if found is None or found[1].strip() == "":
            return default
        key, value = found
        try:
            return int(value)
        except ValueError:
            raise ConfigurationError(
                f"Environment variable {key}={value!r} is not an integer: set it to a whole number."
            ) from None

    def set(self, value: object, env: dict[str, str] | None = None) -> None:
        """Write the canonical name (into ``env`` when given, else ``os.environ``)."""
        (os.environ if env is None else env)[self.name] = str(value)


def _var(name: str, doc: str, *aliases: str) -> EnvVar:
    var = EnvVar(name, doc, aliases)
    ENV_VARS[name] = var
    return var


ENV_VARS: dict[str, EnvVar] = {}



def read(name: str) -> str | None:
    """Value of a declared variable (or of one of its aliases), else ``None``."""
    try:
        return ENV_VARS[name].get()
    except KeyError:
        raise ConfigurationError(
            f"{name!r} is not part of accel's environment contract; declare it in accel_state.env."
        ) from None


def snapshot(prefixes: tuple[str, ...] = ("ACCEL", "ACCELERATE")) -> dict[str, str]:
    """Every set variable whose name starts with one of ``prefixes`` (for `accel env`)."""
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(prefixes)}


# --- Accelerate's public environment helpers (accelerate.utils.environment) --------------

def parse_flag_from_env(key: str, default: bool = False) -> bool:
    """Boolean value of the variable ``key`` (1/0, true/false, yes/no, on/off)."""
    return EnvVar(key, "").get_bool(default)


def parse_choice_from_env(key: str, default: str = "no") -> str:
    return os.environ.get(key, str(default))


def get_int_from_env(env_keys: list[str] | tuple[str, ...], default: int) -> int:
    """First non-negative integer among ``env_keys``, else ``default``."""
    for key in env_keys:
        value = EnvVar(key, "").get_int(-1)
        if value is not None and value >= 0:
            return value
    return default


@contextlib.contextmanager
def patch_environment(**kwargs: Any) -> Iterator[None]:
    """Set upper-cased ``kwargs`` as environment variables inside the block, then restore."""
    saved: dict[str, str | None] = {}
    for key, value in kwargs.items():
        key = key.upper()
        saved[key] = os.environ.get(key)
        os.environ[key] = str(value)
    try:
        yield
    finally:
        for key, old in saved.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old


@contextlib.contextmanager
def clear_environment() -> Iterator[None]:
    """Run the block with an empty ``os.environ``; restore everything afterwards."""
    saved = dict(os.environ)
    os.environ.clear()
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


_F = TypeVar("_F", bound=Callable[..., Any])


def purge_accelerate_environment(func_or_cls: _F) -> _F:
    """Decorator: drop ``ACCEL_*``/``ACCELERATE_*`` variables set while the function runs.

    On a class (a ``unittest.TestCase`` or a pytest class), every ``test*`` method plus
    ``setUp``/``tearDown`` is wrapped, those of its subclasses too.
    """
    if isinstance(func_or_cls, type):
        _purge_test_methods(func_or_cls)
        inherited = func_or_cls.__dict__.get("__init_subclass__")

        def __init_subclass__(cls: type, **kwargs: Any) -> None:
            if inherited is not None:
                inherited.__func__(cls, **kwargs)
            else:
                super(func_or_cls, cls).__init_subclass__(**kwargs)
            _purge_test_methods(cls)

        func_or_cls.__init_subclass__ = classmethod(__init_subclass__)  # type: ignore[assignment]
        return func_or_cls
    if getattr(func_or_cls, "_accel_purges_environment", False):
        return func_or_cls

    @functools.wraps(func_or_cls)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        before = snapshot()
        try:
            return func_or_cls(*args, **kwargs)
        finally:
            for key in snapshot():
                if key not in before:
                    del os.environ[key]
                else:
                    os.environ[key] = before[key]

    wrapper._accel_purges_environment = True  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]


def _purge_test_methods(cls: type) -> None:
    """Wrap the test methods ``cls`` defines or inherits (each once)."""
    for attr in dir(cls):
        if attr.startswith("test") or attr in ("setUp", "tearDown"):
            value = getattr(cls, attr)
            if callable(value) and not isinstance(value, type):
                setattr(cls, attr, purge_accelerate_environment(value))


def convert_dict_to_env_variables(current_env: Mapping[str, Any]) -> list[str]:
    """``KEY=value\\n`` lines for an env file (DeepSpeed's launcher sources it in a shell).
    An empty key or value, or one with a space, ``;``, ``<``, ``>`` or a newline, is skipped
    with a warning on the ``accel.utils.environment`` logger."""
    lines = []
    for key, value in current_env.items():
        value = str(value)
        if not key or not value or any(c in key + value for c in _ENV_FILE_FORBIDDEN):
            _environment_logger.warning("Skipping %s=%s for the env file: empty, or it contains "
                                        "one of %r.", key, value, "".join(_ENV_FILE_FORBIDDEN))
            continue
        lines.append(f"{key}={value}\n")
    return lines
