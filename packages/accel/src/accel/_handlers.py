"""The kwargs handlers an ``Accelerator`` was given, under Accelerate's attribute names.

``accel._resolve.collect_handlers`` sorts ``kwargs_handlers=[...]`` into one slot per kind
(a duplicate is an error); these read-only properties expose each slot as Accelerate does
(``accelerator.ddp_handler``, ``.scaler_handler``, ...): the handler of that kind that was
passed, else None.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from accel_precision import FP8RecipeKwargs

if TYPE_CHECKING:
    from accel_parallel import DistributedDataParallelKwargs
    from accel_precision import AORecipeKwargs, AutocastKwargs, GradScalerKwargs, TERecipeKwargs
    from accel_state import InitProcessGroupKwargs

    from accel._profiling import ProfileKwargs
    from accel._resolve import Handlers

__all__ = ["HandlersMixin"]


class HandlersMixin:
    """Accelerate's ``*_handler`` attributes of ``Accelerator`` (expects ``_handlers``)."""

    _handlers: Handlers

    @property
    def ddp_handler(self) -> DistributedDataParallelKwargs | None:
        return self._handlers.ddp

    @property
    def scaler_handler(self) -> GradScalerKwargs | None:
        return self._handlers.grad_scaler

    @property
    def init_handler(self) -> InitProcessGroupKwargs | None:
        return self._handlers.init_process_group

    @property
    def autocast_handler(self) -> AutocastKwargs | None:
        return self._handlers.autocast

    @property
    def profile_handler(self) -> ProfileKwargs | None:
        """Default options of :meth:`profile`."""
        return self._handlers.profile

    @property
    def ao_recipe_handler(self) -> AORecipeKwargs | None:
        return self._handlers.ao_recipe

    @property
    def te_recipe_handler(self) -> TERecipeKwargs | None:
        """A ``TERecipeKwargs`` passed as such (the deprecated ``FP8RecipeKwargs`` is
        :attr:`fp8_recipe_handler`, as in Accelerate)."""
        recipe = self._handlers.te_recipe
        return None if isinstance(recipe, FP8RecipeKwargs) else recipe

    @property
    def fp8_recipe_handler(self) -> FP8RecipeKwargs | None:
        """The deprecated ``FP8RecipeKwargs``, when one was passed."""
        recipe = self._handlers.te_recipe
        return recipe if isinstance(recipe, FP8RecipeKwargs) else None

    @property
    def msamp_recipe_handler(self) -> Any:
        """Always None: accel does not run MS-AMP (fp8 runs through torchao or
        Transformer Engine)."""
        return None

    @property
    def has_fp8_handler(self) -> bool:
        """Whether an fp8 recipe handler (torchao or Transformer Engine) was passed."""
        return self._handlers.ao_recipe is not None or self._handlers.te_recipe is not None
