"""The Accelerator's checkpoint methods, kept light: the checkpoint machinery loads at the
first save or load.

``from accel import Accelerator`` needs the class the Accelerator inherits its methods from,
not accel-checkpoint's manifests, hashing (xxhash), layouts and loaders: each method imports
:mod:`accel._checkpointing` (which does the work) when it is called, and
:func:`init_checkpointing` imports only the project configuration. ``accel.checkpointing``
re-exports both names; ``accel._checkpointing`` imports nothing of this module (no cycle).
"""

from __future__ import annotations

import collections
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from accel_state.errors import ConfigurationError

if TYPE_CHECKING:
    import torch
    from accel_checkpoint.project import ProjectConfiguration

__all__ = ["CheckpointingMixin", "init_checkpointing"]


def init_checkpointing(accelerator: Any, project_dir: str | os.PathLike[str] | None,
                       project_config: ProjectConfiguration | None) -> None:
    """Called by ``Accelerator.__init__``: project configuration and hook registries."""
    from accel_checkpoint.project import ProjectConfiguration

    config = project_config if project_config is not None else ProjectConfiguration()
    if not isinstance(config, ProjectConfiguration):
        raise ConfigurationError(f"project_config must be a ProjectConfiguration, got "
                                 f"{type(config).__name__}.")
    if project_dir is not None and config.project_dir is None:
        config.set_directories(project_dir)
    config.check_automatic_naming()
    accelerator.project_configuration = config
    accelerator._save_model_state_pre_hook = collections.OrderedDict()
    accelerator._load_model_state_pre_hook = collections.OrderedDict()
    accelerator._pending_checkpoint = None
    accelerator._checkpoint_verification = None


def _work() -> Any:
    """:mod:`accel._checkpointing`, imported on the first checkpoint call."""
    from accel import _checkpointing

    return _checkpointing


class CheckpointingMixin:
    """The Accelerator's checkpoint methods: thin delegations to ``accel._checkpointing``."""

    @property
    def project_dir(self) -> str | None:
        return self.project_configuration.project_dir

    @property
    def logging_dir(self) -> str | None:
        return self.project_configuration.logging_dir

    @property
    def save_iteration(self) -> int:
        """Number of the next automatically named checkpoint."""
        return self.project_configuration.iteration

    def save_state(self, output_dir: Any = None, safe_serialization: bool = True,
                   **save_model_func_kwargs: Any) -> str:
        """Save models, optimizers, schedulers, dataloader positions, RNG states, ...

        Crash-safe and verified (see accel_checkpoint); ``async_save=True`` writes in the
        background. Call on every process.
        """
        return _work().save_state(self, output_dir, safe_serialization,
                                  **save_model_func_kwargs)

    def load_state(self, input_dir: Any = None, load_kwargs: Any = None,
                   verify: str | None = None, *, trust_pickles: bool | None = None,
                   **load_model_func_kwargs: Any) -> None:
        """Restore a checkpoint (default: the newest complete one with automatic naming).

        ``verify="background"`` checks the bytes while training starts; ``trust_pickles``
        allows a layout whose files need a full unpickler (see docs/checkpoint.md).
        """
        _work().load_state(self, input_dir, load_kwargs, verify, trust_pickles=trust_pickles,
                           **load_model_func_kwargs)

    def register_for_checkpointing(self, *objects: Any) -> None:
        _work().register_for_checkpointing(self, *objects)

    def register_save_state_pre_hook(self, hook: Callable[..., Any]) -> Any:
        return _work().register_save_state_pre_hook(self, hook)

    def register_load_state_pre_hook(self, hook: Callable[..., Any]) -> Any:
        return _work().register_load_state_pre_hook(self, hook)

    def save_model(self, model: torch.nn.Module, save_directory: Any,
                   max_shard_size: int | str = "10GB", safe_serialization: bool = True) -> None:
        _work().save_model(self, model, save_directory, max_shard_size, safe_serialization)

    def get_state_dict(self, model: torch.nn.Module, unwrap: bool = True) -> dict[str, Any]:
        return _work().get_state_dict(self, model, unwrap)

    def wait_for_checkpoint(self) -> None:
        """Block until an ``async_save`` is committed (``end_training`` does this too)."""
        _work().wait_for_checkpoint(self)
