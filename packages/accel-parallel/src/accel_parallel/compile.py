"""torch.compile for prepared models: :class:`TorchDynamoPlugin` and regional compilation.

``Accelerator(dynamo_backend="inductor")``, ``Accelerator(dynamo_plugin=TorchDynamoPlugin(...))``
or ``accel launch --dynamo_backend ...`` (``ACCELERATE_DYNAMO_*``) make every prepared model
compiled. The strategy applies it (:meth:`Strategy.compile_model`): by default after its
wrappers, as Accelerate does (``torch.compile(DDP(model))`` lets dynamo split the graph at
DDP's buckets); a strategy with an ordered pipeline (TP, activation checkpointing, compile,
FSDP) calls it in place before sharding instead.

Regional compilation compiles each repeated block (the layers of a transformer) once
rather than the whole model: dynamo reuses one compiled graph for every block of the same
code, so compile time no longer grows with depth. Blocks are compiled in place
(``nn.Module.compile``): parameter names, state dicts and optimizers are unchanged.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

import torch
from accel_state import ConfigurationError, KwargsHandler, env

__all__ = ["DynamoBackend", "TorchDynamoPlugin", "compile_model", "compile_regions",
           "has_compiled_regions", "is_compiled_module", "get_module_children_bottom_up",
           "recursive_getattr"]


class DynamoBackend(str, enum.Enum):
    """torch.compile backends by Accelerate's names (the backend is the lower-cased value)."""

    NO = "NO"
    EAGER = "EAGER"
    AOT_EAGER = "AOT_EAGER"
    INDUCTOR = "INDUCTOR"
    AOT_TS_NVFUSER = "AOT_TS_NVFUSER"
    NVPRIMS_NVFUSER = "NVPRIMS_NVFUSER"
    CUDAGRAPHS = "CUDAGRAPHS"
    OFI = "OFI"
    FX2TRT = "FX2TRT"
    ONNXRT = "ONNXRT"
    TENSORRT = "TENSORRT"
    AOT_TORCHXLA_TRACE_ONCE = "AOT_TORCHXLA_TRACE_ONCE"
    TORCHXLA_TRACE_ONCE = "TORCHXLA_TRACE_ONCE"
    IPEX = "IPEX"
    TVM = "TVM"
    HPU_BACKEND = "HPU_BACKEND"

    @classmethod
    def parse(cls, value: Any, source: str) -> DynamoBackend:
        """``value`` (an enum member or a name in any case) as a backend; ``source`` names
        where it came from in the error."""
        if isinstance(value, cls):
            return value
        try:
            return cls(str(value).upper())
        except ValueError:
            names = ", ".join(b.value.lower() for b in cls)
            raise ConfigurationError(
                f"{source}={value!r} is not a torch.compile backend accel knows; use one of "
                f"{names}.") from None


_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
#: what each torch.compile argument means when left out (``"no"``: the plugin's own default)
_COMPILE_DEFAULTS = {"backend": "no", "mode": "default", "fullgraph": False, "dynamic": None,
                     "options": None, "disable": False}


@dataclass
class TorchDynamoPlugin(KwargsHandler):
    """How prepared models are compiled (Accelerate's fields). A field left as None is read
    from its ``ACCELERATE_DYNAMO_*`` variable (set by ``accel launch --dynamo_*``)."""

    #: backend (a :class:`DynamoBackend` or its name, any case); ``"no"`` compiles nothing
    backend: DynamoBackend | str | None = None
    #: ``"default"``, ``"reduce-overhead"``, ``"max-autotune"`` or
    #: ``"max-autotune-no-cudagraphs"``
    mode: str | None = None
    #: a graph break is an error instead of a fall-back to Python
    fullgraph: bool | None = None
    #: trace with dynamic shapes (True), specialise (False) or let torch decide (None)
    dynamic: bool | None = None
    #: backend options (torch.compile's ``options``); exclusive with a non-default ``mode``
    options: dict | None = None
    #: make torch.compile a no-op (for debugging)
    disable: bool = False
    #: compile each repeated block once instead of the whole model
    use_regional_compilation: bool | None = None

    def __post_init__(self) -> None:
        if self.backend is None:
            self.backend = env.DYNAMO_BACKEND.get() or "no"
        self.backend = DynamoBackend.parse(self.backend, "TorchDynamoPlugin(backend)")
        if self.mode is None:
            self.mode = env.DYNAMO_MODE.get() or "default"
        if self.mode not in _MODES:
            raise ConfigurationError(
                f"TorchDynamoPlugin(mode={self.mode!r}) is not a torch.compile mode; use one of "
                f"{', '.join(_MODES)}.")
        if self.options and self.mode != "default":
            raise ConfigurationError(
                f"TorchDynamoPlugin got both mode={self.mode!r} and options={self.options!r}; "
                "torch.compile takes one of them: drop the mode or the options.")
        if self.fullgraph is None:
            self.fullgraph = env.DYNAMO_USE_FULLGRAPH.get_bool(False)
        if self.dynamic is None and env.DYNAMO_USE_DYNAMIC.get() is not None:
            self.dynamic = env.DYNAMO_USE_DYNAMIC.get_bool(False)
        if self.use_regional_compilation is None:
            self.use_regional_compilation = env.DYNAMO_USE_REGIONAL_COMPILATION.get_bool(False)

    @property
    def enabled(self) -> bool:
        """Whether prepared models are compiled (a backend other than ``no``)."""
        return self.backend is not DynamoBackend.NO

    def to_dict(self) -> dict[str, Any]:
        """Every field, the backend as torch names it (Accelerate's ``to_dict``)."""
        values = super().to_dict()
        values["backend"] = self.backend.value.lower()
        return values

    def to_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of ``torch.compile`` that differ from its defaults, as every
        ``KwargsHandler`` gives only what was changed (Accelerate's rule); the defaults are
        the fields' own, never the ``ACCELERATE_DYNAMO_*`` environment."""
        kwargs: dict[str, Any] = {"backend": self.backend.value.lower(), "mode": self.mode,
                                  "fullgraph": self.fullgraph, "dynamic": self.dynamic,
                                  "options": self.options or None, "disable": self.disable}
        return {k: v for k, v in kwargs.items() if v != _COMPILE_DEFAULTS[k]}


def is_compiled_module(module: Any) -> bool:
    """Whether ``module`` is a ``torch.compile`` wrapper (``OptimizedModule``)."""
    return isinstance(module, torch.nn.Module) and type(module).__name__ == "OptimizedModule" \
        and hasattr(module, "_orig_mod")


def _compiled_in_place(module: torch.nn.Module) -> bool:
    return getattr(module, "_compiled_call_impl", None) is not None


def has_compiled_regions(module: torch.nn.Module) -> bool:
    """Whether some submodule of ``module`` (or itself) is compiled, as a wrapper or in place."""
    return any(is_compiled_module(m) or _compiled_in_place(m) for m in module.modules())


def recursive_getattr(obj: Any, attr: str) -> Any:
    """``obj.a.b.c`` for ``attr="a.b.c"``."""
    for name in attr.split("."):
        obj = getattr(obj, name)
    return obj


def get_module_children_bottom_up(model: torch.nn.Module,
                                  return_fn: bool = False) -> list[Any]:
    """Every submodule of ``model``, children before their parents, ``model`` last (the
    order in which sharding or compiling wraps them); with ``return_fn``, their forwards."""
    ordered: list[torch.nn.Module] = []

    def visit(module: torch.nn.Module) -> None:
        for child in module.children():
            visit(child)
        ordered.append(module)

    visit(model)
    return [m.forward for m in ordered] if return_fn else ordered


def _repeated_blocks(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The blocks regional compilation compiles: modules whose class is named in the
    model's ``_repeated_blocks`` (transformers/diffusers convention), else the children of
    every ``ModuleList``/``Sequential`` that holds two or more modules of the same class."""
    named = set(getattr(model, "_repeated_blocks", None) or ())
    if named:
        return [m for m in model.modules() if type(m).__name__ in named]
    blocks: list[torch.nn.Module] = []

    def visit(module: torch.nn.Module) -> None:
        if isinstance(module, (torch.nn.ModuleList, torch.nn.Sequential)):
            kinds = [type(child) for child in module.children()]
            repeated = [child for child, kind in zip(module.children(), kinds, strict=True)
                        if kinds.count(kind) > 1 and any(True for _ in child.parameters())]
            if repeated:
                blocks.extend(repeated)
                return
        for child in module.children():
            visit(child)

    visit(model)
    return blocks


def compile_regions(module: torch.nn.Module, **compile_kwargs: Any) -> torch.nn.Module:
    """Compile each repeated block of ``module`` in place (the whole module in place when it
    has none) and return ``module``: names and parameters are unchanged."""
    blocks = _repeated_blocks(module)
    for block in blocks or [module]:
        if not _compiled_in_place(block):
            block.compile(**compile_kwargs)
    return module


def compile_model(model: torch.nn.Module, plugin: TorchDynamoPlugin | None, *,
                  in_place: bool = False) -> torch.nn.Module:
    """``model`` compiled as ``plugin`` asks; unchanged without a plugin, with the ``no``
    backend, or when it is already compiled (so a strategy may call this twice).

    Whole-model compilation returns ``torch.compile(model)`` (an ``OptimizedModule``, as
    Accelerate's ``prepare`` does) unless ``in_place``: then ``model.compile()`` keeps the
    module itself, which a strategy that shards afterwards needs.
    """
    if plugin is None or not plugin.enabled:
        return model
    if is_compiled_module(model) or has_compiled_regions(model):
        return model
    kwargs = plugin.to_kwargs()
    if plugin.use_regional_compilation:
        return compile_regions(model, **kwargs)
    if in_place:
        model.compile(**kwargs)
        return model
    return torch.compile(model, **kwargs)

