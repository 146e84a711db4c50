"""``AcceleratorState``: the process state plus what the ``Accelerator`` resolved, shared.

Accelerate's libraries (transformers, peft, diffusers) and user code read the run's
configuration from ``AcceleratorState()`` anywhere in the process: the mixed precision,
the distributed type (``FSDP``, ``DEEPSPEED``, ...), the parallelism plugins, the device
mesh. It is a shared-state object over :class:`~accel_state.PartialState` (every instance
sees the same attributes); everything the process state knows (device, ranks,
``wait_for_everyone``, ``main_process_first``, ...) is read through to it. The plugins stay
opaque here: the facade fills the fields from the Precision and Strategy it resolved, so
accel-state never imports a plugin class (DESIGN.md §8).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from accel_parallel.state_view import (
    PLUGIN_ATTRIBUTES,
    RunView,
    plugin_named,
    refuse_unsupported_plugins,
    requested_view,
    selected_plugin,
    strategy_view,
)
from accel_state import ConfigurationError, PartialState, env
from accel_state.state import SharedDict, _missing_attribute

__all__ = ["AcceleratorState"]

#: what the shared state holds once built: the process state's and the resolved run's
_STATE_ATTRIBUTES = PartialState._STATE_ATTRIBUTES | PLUGIN_ATTRIBUTES | {
    "mixed_precision", "device_mesh", "downcast_bfloat"}


class AcceleratorState:
    """The run's shared configuration (Accelerate's ``accelerate.state.AcceleratorState``).

    Built by the ``Accelerator`` (each new ``Accelerator`` refreshes it). Constructed before
    any ``Accelerator``, it reads the launch environment (``ACCELERATE_MIXED_PRECISION``,
    ``ACCELERATE_USE_FSDP``, ``ACCELERATE_USE_DEEPSPEED``, ``ACCELERATE_USE_CPU``) and the
    plugins given to it. Once built, asking for another ``mixed_precision`` is an error.
    """

    _shared_state: dict[str, Any] = SharedDict()

    def __init__(self, mixed_precision: str | None = None, cpu: bool = False,
                 dynamo_plugin: Any = None, deepspeed_plugin: Any = None,
                 fsdp_plugin: Any = None, torch_tp_plugin: Any = None,
                 megatron_lm_plugin: Any = None, parallelism_config: Any = None,
                 _from_accelerator: bool = False, **kwargs: Any) -> None:
        self.__dict__ = self._shared_state
        refuse_unsupported_plugins("AcceleratorState", megatron_lm_plugin=megatron_lm_plugin)
        if self.initialized:
            if mixed_precision is not None and str(mixed_precision) != self.mixed_precision:
                raise ConfigurationError(
                    f"AcceleratorState was already built with mixed_precision="
                    f"{self.mixed_precision!r}; AcceleratorState(mixed_precision="
                    f"{mixed_precision!r}) cannot change it. Pass mixed_precision to the "
                    "Accelerator instead (a new Accelerator refreshes the state).")
            return
        state = PartialState(cpu, **kwargs)
        # the rule lives beside the plugin resolution (accel_parallel.state_view)
        view = requested_view(state.distributed_type, dynamo_plugin=dynamo_plugin,
                              deepspeed_plugin=deepspeed_plugin, fsdp_plugin=fsdp_plugin,
                              torch_tp_plugin=torch_tp_plugin,
                              parallelism_config=parallelism_config)
        self._fill(str(mixed_precision or env.MIXED_PRECISION.get() or "no"), view)

    @classmethod
    def _for_accelerator(cls, strategy: Any, plugins: Mapping[str, Any]) -> AcceleratorState:
        """Refresh the shared state from an Accelerator's resolved strategy (and the precision
        it runs) and plugins (by kind, as ``accel._resolve.resolve_plugins`` returns them)."""
        cls._shared_state.clear()
        self = cls.__new__(cls)
        self.__dict__ = cls._shared_state
        # what runs, also what the strategy built itself (accel_parallel.state_view)
        self._fill(strategy.mixed_precision, strategy_view(strategy, plugins))
        return self

    def _fill(self, mixed_precision: str, view: RunView) -> None:
        # the process state's plain attributes (device, ranks, ...) as our own, as Accelerate
        # does, so reading them costs a dict lookup; its methods and properties go through
        # __getattr__ to the one PartialState
        partial = PartialState()
        self.__dict__.update(partial.__dict__)
        self._partial = partial
        self.mixed_precision = mixed_precision
        self.distributed_type = view.distributed_type
        self.__dict__.update(view.plugins)  # Accelerate's plugin attributes, by name
        self._shards_parameters = view.shards_parameters
        self.device_mesh = view.device_mesh
        self.downcast_bfloat = False
        self._initialized = True

    # -- shared-state plumbing ------------------------------------------------------------------
    def __getattr__(self, name: str) -> Any:
        """Everything the process state knows (device, ranks, ``wait_for_everyone``, ...).
        After ``_reset_state()`` the state's own attributes are gone until an Accelerator
        (or AcceleratorState) is built again, and the error says so."""
        if name.startswith("__") or name in ("_shared_state", "_partial"):
            raise AttributeError(name)
        partial = self._shared_state.get("_partial")
        if partial is None:
            raise _missing_attribute("AcceleratorState", name, name in _STATE_ATTRIBUTES)
        try:
            return getattr(partial, name)
        except AttributeError:
            if hasattr(type(partial), name):
                raise  # a property of the process state failed inside: keep its own error
            raise _missing_attribute("AcceleratorState", name, False) from None

    def __getstate__(self) -> dict[str, Any]:
        """The attributes without the process-state object: that one is per process."""
        state = dict(self.__dict__)
        state.pop("_partial", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickled, the state points at this process's PartialState (the very object the
        live state holds, so a copy compares equal to it, as in Accelerate)."""
        self.__dict__.update(state)
        self._partial = self._shared_state.get("_partial") or PartialState()

    @property
    def initialized(self) -> bool:
        return bool(self._shared_state.get("_initialized"))

    @classmethod
    def _reset_state(cls, reset_partial_state: bool = False) -> None:
        """Forget the shared state (tests); ``reset_partial_state`` also the process state."""
        cls._shared_state.clear()
        if reset_partial_state:
            PartialState._reset_state()

    # -- plugins ----------------------------------------------------------------------------------
    @property
    def is_fsdp2(self) -> bool:
        """Whether models are sharded on the mesh (the strategy's ``shards_parameters``;
        accel's FSDP is always FSDP2, ``fully_shard``)."""
        _ = self.distributed_type  # after _reset_state(): the AttributeError that says so
        return bool(self._shared_state.get("_shards_parameters"))

    @property
    def deepspeed_plugin(self) -> Any:
        """The DeepSpeed plugin in use (the selected one of several), else None."""
        return selected_plugin(self.deepspeed_plugins)

    def get_deepspeed_plugin(self, name: str) -> Any:
        """The DeepSpeed plugin registered as ``name`` (``Accelerator(deepspeed_plugins=...)``)."""
        return plugin_named(self.deepspeed_plugins, name)

    def select_deepspeed_plugin(self, name: str | None = None) -> None:
        """Make ``name`` the active DeepSpeed plugin (the one the next ``prepare`` uses)."""
        chosen = self.get_deepspeed_plugin(name) if name is not None else self.deepspeed_plugin
        if chosen is not None:
            chosen.select()  # the plugin knows its family (the Accelerator's named plugins)

    @property
    def use_distributed(self) -> bool:
        return PartialState().use_distributed

    @property
    def fork_launched(self) -> bool:
        return PartialState().fork_launched

    def destroy_process_group(self, group: Any = None) -> None:
        """Destroy ``group`` or the default one (a method, not the delegation of
        ``__getattr__``, so Accelerate's scripts may call it after ``_reset_state()``)."""
        PartialState().destroy_process_group(group)

    def __repr__(self) -> str:
        return (f"AcceleratorState(distributed_type={self.distributed_type}, "
                f"mixed_precision={self.mixed_precision!r}, device={PartialState().device}, "
                f"num_processes={PartialState().num_processes})")
