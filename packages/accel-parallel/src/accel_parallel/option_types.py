"""Options given as data (``--strategy_config``, a config file's ``strategy_config:``, a
preset's) checked against the dataclass a strategy declares, field type by field type.

The values arrive as JSON or YAML, so a wrong one would otherwise surface deep inside every
worker; here each is compared with its field's annotation (``int``, ``float``, ``bool``,
``str``, ``Literal``, an ``Enum``, ``Optional`` / unions, lists and mappings) and refused in
one line naming the key, the value and what was expected. The launcher runs the same check
before any worker starts. :func:`describe_fields` lists the same declaration for
``accel strategies``.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import enum
import sys
import types
import typing
from collections.abc import Mapping
from typing import Any

from accel_state import ConfigurationError

__all__ = ["OptionField", "check_option_values", "describe_fields", "describe_type"]

_UNSET = object()


@dataclasses.dataclass(frozen=True)
class OptionField:
    """One option a strategy takes: its name, its type in words and its default."""

    name: str
    type: str
    default: str


def _option_fields(cls: type) -> list[dataclasses.Field]:
    return [f for f in dataclasses.fields(cls) if f.init and not f.name.startswith("_")]


def _hints(cls: type) -> dict[str, Any]:
    """Each field's resolved annotation; one that cannot be resolved is left unchecked."""
    try:
        return typing.get_type_hints(cls)
    except Exception:  # an annotation naming something only imported for type checkers
        found: dict[str, Any] = {}
        namespace = vars(sys.modules.get(cls.__module__, object()))
        for field in _option_fields(cls):
            if not isinstance(field.type, str):
                found[field.name] = field.type
                continue
            try:
                found[field.name] = eval(field.type, dict(namespace))  # noqa: S307 (annotation)
            except Exception:
                continue
        return found


def describe_type(annotation: Any) -> str:
    """An annotation in words, as messages and listings show it."""
    origin = typing.get_origin(annotation)
    if annotation is Any:
        return "any value"
    if annotation is None or annotation is type(None):
        return "null"
    if origin is typing.Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(annotation))
    if origin is typing.Union or origin is types.UnionType:
        return " or ".join(describe_type(a) for a in typing.get_args(annotation))
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return "one of " + ", ".join(repr(m.value) for m in annotation)
    named = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
    if annotation in named:
        return named[annotation]
    if _is_sequence(annotation):
        return "a list"
    if _is_mapping(annotation):
        return "a mapping"
    return getattr(annotation, "__name__", str(annotation))


def _is_sequence(annotation: Any) -> bool:
    target = typing.get_origin(annotation) or annotation
    return target in (list, tuple, set, frozenset, collections.abc.Sequence)


def _is_mapping(annotation: Any) -> bool:
    target = typing.get_origin(annotation) or annotation
    return target in (dict, collections.abc.Mapping)


def _conform(value: Any, annotation: Any) -> Any:
    """``value`` as the annotation takes it (an enum member for its value or name, a float
    for an integer), or ``_UNSET`` when it does not fit. Types it cannot judge pass."""
    if annotation is Any or annotation is None and value is None:
        return value
    if annotation is type(None):
        return value if value is None else _UNSET
    origin = typing.get_origin(annotation)
    if origin is typing.Union or origin is types.UnionType:
        for choice in typing.get_args(annotation):
            fitted = _conform(value, choice)
            if fitted is not _UNSET:
                return fitted
        return _UNSET
    if origin is typing.Literal:
        return value if value in typing.get_args(annotation) else _UNSET
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return _enum_member(annotation, value)
    if annotation is bool:
        return value if isinstance(value, bool) else _UNSET
    if annotation is int:
        return value if isinstance(value, int) and not isinstance(value, bool) else _UNSET
    if annotation is float:
        fits = isinstance(value, (int, float)) and not isinstance(value, bool)
        return float(value) if fits else _UNSET
    if annotation is str:
        return value if isinstance(value, str) else _UNSET
    if _is_sequence(annotation):
        return value if isinstance(value, (list, tuple)) else _UNSET
    if _is_mapping(annotation):
        return value if isinstance(value, Mapping) else _UNSET
    if origin is collections.abc.Callable or annotation is collections.abc.Callable:
        return value if callable(value) else _UNSET
    if isinstance(annotation, type) and origin is None:
        if isinstance(value, annotation):
            return value
        # a nested config dataclass given as a mapping: its own class judges the fields
        return value if dataclasses.is_dataclass(annotation) and isinstance(value, Mapping) \
            else _UNSET
    return value  # a generic it cannot judge


def _enum_member(kind: type[enum.Enum], value: Any) -> Any:
    if isinstance(value, kind):
        return value
    for member in kind:
        if value == member.value or (isinstance(value, str)
                                     and value.lower() in (member.name.lower(),
                                                           str(member.value).lower())):
            return member
    return _UNSET


def check_option_values(cls: type, options: Mapping[str, Any], *, what: str,
                        source: str) -> dict[str, Any]:
    """``options`` checked against dataclass ``cls``'s fields, converted where the type
    says (an enum's value to its member); an unknown key or a value of the wrong type is a
    :class:`ConfigurationError` of one line naming it."""
    known = {f.name: f for f in _option_fields(cls)}
    unknown = [key for key in options if key not in known]
    if unknown:
        raise ConfigurationError(
            f"{source} gives option(s) {', '.join(map(repr, unknown))}, which {what} "
            f"({cls.__name__}) does not take; its options: {', '.join(known) or 'none'}.")
    hints = _hints(cls)
    checked: dict[str, Any] = {}
    for key, value in options.items():
        annotation = hints.get(key, Any)
        fitted = _conform(value, annotation)
        if fitted is _UNSET:
            raise ConfigurationError(
                f"{source} gives {key}={value!r} for {what}, but {cls.__name__}.{key} expects "
                f"{describe_type(annotation)}: fix the value.")
        checked[key] = fitted
    return checked


def describe_fields(cls: type | None) -> list[OptionField]:
    """The options dataclass ``cls`` declares, with their types in words and defaults."""
    if cls is None:
        return []
    hints = _hints(cls)
    found = []
    for field in _option_fields(cls):
        if field.default is not dataclasses.MISSING:
            default = field.default.value if isinstance(field.default, enum.Enum) \
                else field.default
            shown = repr(default)
        elif field.default_factory is not dataclasses.MISSING:
            shown = repr(field.default_factory())
        else:
            shown = "(required)"
        found.append(OptionField(field.name, describe_type(hints.get(field.name, Any)), shown))
    return found
