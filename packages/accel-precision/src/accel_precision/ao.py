"""fp8 training through torchao: Linear layers become ``Float8Linear``, the rest runs in bf16.

torchao is imported only when this precision is built (``pip install "accel-precision[torchao]"``).
Its fp8 matmuls run on CPU too (emulated), so this path is tested for real without a GPU.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from accel_state.imports import require

from accel_precision.amp import BF16Precision
from accel_precision.kwargs import AORecipeKwargs, AutocastKwargs

if TYPE_CHECKING:
    from accel_precision.kwargs import GradScalerKwargs, TERecipeKwargs

__all__ = ["TorchAOFP8Precision", "convert_model_to_fp8_ao", "default_module_filter",
           "find_first_last_linear_layers",
           "filter_linear_layers", "has_ao_layers"]


def _torchao_float8() -> Any:
    require("torchao", extra="torchao", feature="fp8 training with torchao", dist="accel-precision")
    return require("torchao.float8", extra="torchao", feature="fp8 training with torchao",
                   package="torchao", dist="accel-precision")


def find_first_last_linear_layers(model: torch.nn.Module) -> tuple[str | None, str | None]:
    """Qualified names of the first and last ``nn.Linear`` in ``model`` (module order)."""
    names = [name for name, module in model.named_modules() if isinstance(module, torch.nn.Linear)]
    return (names[0], names[-1]) if names else (None, None)


def filter_linear_layers(module: torch.nn.Module, fqn: str, layers_to_filter: list[str]) -> bool:
    """True when ``module`` should become fp8: a Linear with dims that are multiples of 16,
    not named in ``layers_to_filter``."""
    if not isinstance(module, torch.nn.Linear):
        return False
    if module.in_features % 16 != 0 or module.out_features % 16 != 0:
        return False  # fp8 matmul kernels need 16-aligned shapes
    return fqn not in layers_to_filter


def default_module_filter(model: torch.nn.Module) -> Callable[[torch.nn.Module, str], bool]:
    """The default filter: keep the first and last Linear (most sensitive to precision) high."""
    first, last = find_first_last_linear_layers(model)
    skip = [name for name in (first, last) if name is not None]
    return functools.partial(filter_linear_layers, layers_to_filter=skip)


def has_ao_layers(model: torch.nn.Module) -> bool:
    """Whether ``model`` holds torchao ``Float8Linear`` layers (imports torchao only if loaded)."""
    return any(type(module).__name__ == "Float8Linear" for module in model.modules())


def _config(recipe: AORecipeKwargs) -> Any:
    if recipe.config is not None:
        return recipe.config
    float8 = _torchao_float8()
    return float8.Float8LinearConfig(pad_inner_dim=recipe.pad_inner_dim,
                                     enable_fsdp_float8_all_gather=recipe.enable_fsdp_float8_all_gather)


def convert_model_to_fp8_ao(model: torch.nn.Module, config: Any = None,
                            module_filter_func: Callable[[torch.nn.Module, str], bool] | None = None
                            ) -> torch.nn.Module:
    """Swap ``model``'s eligible Linear layers for torchao ``Float8Linear`` in place.

    Parameters stay the same objects, so an optimizer built before conversion keeps working.
    """
    return _convert(model, AORecipeKwargs(config=config, module_filter_func=module_filter_func))


def _convert(model: torch.nn.Module, recipe: AORecipeKwargs) -> torch.nn.Module:
    float8 = _torchao_float8()
    filter_fn = recipe.module_filter_func or default_module_filter(model)
    float8.convert_to_float8_training(model, module_filter_fn=filter_fn, config=_config(recipe))
    return model


class TorchAOFP8Precision(BF16Precision):
    """fp8 Linear layers (torchao) inside bf16 autocast for everything else."""

    name = "fp8"

    def __init__(self, *, device: torch.device | str | None = None,
                 autocast_kwargs: AutocastKwargs | None = None,
                 recipe: AORecipeKwargs | None = None) -> None:
        super().__init__(device=device, autocast_kwargs=autocast_kwargs)
        self.recipe = recipe or AORecipeKwargs()
        _torchao_float8()  # fail now, with the install line, rather than at prepare()

    @classmethod
    def from_handlers(cls, device: torch.device, *, autocast: AutocastKwargs | None = None,
                      scaler: GradScalerKwargs | None = None,
                      ao_recipe: AORecipeKwargs | None = None,
                      te_recipe: TERecipeKwargs | None = None) -> TorchAOFP8Precision:
        return cls(device=device, autocast_kwargs=autocast, recipe=ao_recipe)

    @property
    def fp8_backend(self) -> str:
        return "AO"

    def adapt_to_sharding(self) -> None:
        """FSDP2 all-gathers the fp8 layers' weights in fp8 (half the bytes of bf16), unless
        the recipe brings its own torchao ``config``, which is used as given."""
        if self.recipe.config is None:
            self.recipe = dataclasses.replace(self.recipe, enable_fsdp_float8_all_gather=True)

    def convert_module(self, module: torch.nn.Module) -> torch.nn.Module:
        if has_ao_layers(module):
            return module
        return _convert(module, self.recipe)
