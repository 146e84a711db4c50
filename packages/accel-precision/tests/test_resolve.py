"""Choosing a precision: one rule for code and environment, the registry, and every error path."""

from __future__ import annotations

import sys
import warnings

import pytest
import torch
from accel_precision import (
    PRECISIONS,
    AORecipeKwargs,
    AutocastKwargs,
    BF16Precision,
    FP8RecipeKwargs,
    FP16Precision,
    GradScalerKwargs,
    NoPrecision,
    Precision,
    PrecisionType,
    TEFP8Precision,
    TERecipeKwargs,
    build_precision,
    resolve_mixed_precision,
)
from accel_precision.te import import_transformer_engine
from accel_state import ConfigurationError, MissingDependencyError
from accel_state.imports import is_transformer_engine_available


def test_default_is_full_precision():
    assert resolve_mixed_precision(None)[0] == "no"
    assert isinstance(build_precision(None, "cpu"), NoPrecision)


@pytest.mark.parametrize("value, expected", [
    ("bf16", BF16Precision), ("BF16", BF16Precision), (PrecisionType.FP16, FP16Precision),
    ("no", NoPrecision), ("fp32", NoPrecision),
])
def test_argument_picks_the_precision(value, expected):
    precision = build_precision(value, "cpu")
    assert type(precision) is expected


@pytest.mark.parametrize("variable", ["ACCEL_MIXED_PRECISION", "ACCELERATE_MIXED_PRECISION"])
def test_environment_picks_the_precision(monkeypatch, variable):
    monkeypatch.setenv(variable, "bf16")
    name, source = resolve_mixed_precision(None)
    assert name == "bf16" and variable in source
    assert isinstance(build_precision(None, "cpu"), BF16Precision)


def test_agreeing_sources_are_fine_and_empty_variable_is_unset(monkeypatch):
    monkeypatch.setenv("ACCEL_MIXED_PRECISION", "bf16")
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "BF16")
    assert resolve_mixed_precision("bf16")[0] == "bf16"
    monkeypatch.setenv("ACCEL_MIXED_PRECISION", "")
    monkeypatch.delenv("ACCELERATE_MIXED_PRECISION")
    assert resolve_mixed_precision("fp16")[0] == "fp16"


def test_the_argument_wins_over_the_environment_with_a_warning_naming_both(monkeypatch):
    """As in Accelerate, code beats ``accel launch --mixed_precision``; accel says so."""
    monkeypatch.setenv("ACCEL_MIXED_PRECISION", "fp16")
    with pytest.warns(UserWarning) as caught:
        precision = build_precision("bf16", "cpu")
    assert precision.name == "bf16"
    message = str(caught[0].message)
    assert "Accelerator(mixed_precision='bf16') overrides" in message
    assert "ACCEL_MIXED_PRECISION=fp16" in message and "\n" not in message
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "fp16")  # both spellings, one value
    with pytest.warns(UserWarning, match="running in 'no'"):
        assert resolve_mixed_precision("fp32")[0] == "no"


def test_the_two_variable_spellings_conflict_too(monkeypatch):
    monkeypatch.setenv("ACCEL_MIXED_PRECISION", "no")
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "fp8")
    with pytest.raises(ConfigurationError, match="ACCELERATE_MIXED_PRECISION=fp8"):
        resolve_mixed_precision(None)


def test_unknown_value_lists_the_valid_ones_and_its_source(monkeypatch):
    with pytest.raises(ConfigurationError, match=r"mixed_precision='fp9'.*Did you mean 'fp8'.*"
                                                 r"Available: bf16, fp16, fp8, no"):
        build_precision("fp9", "cpu")
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "half")
    with pytest.raises(ConfigurationError, match="ACCELERATE_MIXED_PRECISION=half"):
        build_precision(None, "cpu")


def test_builtins_register_through_entry_points():
    import importlib.metadata

    names = {ep.name for ep in importlib.metadata.entry_points(group="accel.precisions")}
    assert {"no", "bf16", "fp16", "fp8"} <= names
    assert PRECISIONS.get("bf16") is BF16Precision


def test_a_third_party_precision_plugs_in_by_name():
    class Int8Precision(Precision):
        name = "int8-demo"

    PRECISIONS.register("int8-demo", Int8Precision)
    try:
        precision = build_precision("int8-demo", "cpu")
        assert type(precision) is Int8Precision and precision.device == torch.device("cpu")
    finally:
        PRECISIONS._clear()


def test_a_precision_object_is_used_as_is_but_still_checked(monkeypatch):
    mine = BF16Precision(device="cpu")
    assert build_precision(mine, "cpu") is mine
    monkeypatch.setenv("ACCEL_MIXED_PRECISION", "fp16")
    with pytest.warns(UserWarning, match="ACCEL_MIXED_PRECISION=fp16"):
        assert build_precision(mine, "cpu") is mine


def test_handlers_reach_the_precision_and_unused_ones_warn():
    fp16 = build_precision("fp16", "cpu", scaler=GradScalerKwargs(init_scale=4.0))
    assert fp16.scaler.get_scale() == 4.0
    with pytest.warns(UserWarning, match="GradScalerKwargs is ignored: mixed_precision='bf16'"):
        build_precision("bf16", "cpu", scaler=GradScalerKwargs())
    with pytest.warns(UserWarning, match="AORecipeKwargs is ignored"):
        build_precision("no", "cpu", ao_recipe=AORecipeKwargs())
    # Accelerate ignores an AutocastKwargs without a word when no mixed precision runs
    with pytest.warns(UserWarning, match=r"AutocastKwargs is ignored: mixed_precision='no' does "
                                         r"not use it \(it applies to a mixed precision\)"):
        build_precision("no", "cpu", autocast=AutocastKwargs())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # bf16 autocasts: it is used
        build_precision("bf16", "cpu", autocast=AutocastKwargs(cache_enabled=False))


def test_fp8_refuses_two_backends_at_once():
    with pytest.raises(ConfigurationError, match="pass only one"):
        build_precision("fp8", "cpu", ao_recipe=AORecipeKwargs(), te_recipe=TERecipeKwargs())


def test_fp8_backend_variable_is_validated(monkeypatch):
    monkeypatch.setenv("ACCELERATE_FP8_BACKEND", "msamp")
    with pytest.raises(ConfigurationError, match="ACCELERATE_FP8_BACKEND='msamp'"):
        build_precision("fp8", "cpu")
    monkeypatch.setenv("ACCELERATE_FP8_BACKEND", "te")
    with pytest.raises(ConfigurationError, match="conflicts with the AO recipe"):
        build_precision("fp8", "cpu", ao_recipe=AORecipeKwargs())


def test_transformer_engine_needs_cuda_and_says_so():
    with pytest.raises(ConfigurationError, match=r"needs a CUDA GPU.*'cpu'.*AORecipeKwargs.*"
                                                 r'pip install "transformer-engine\[pytorch\]"'):
        build_precision("fp8", "cpu", te_recipe=TERecipeKwargs())
    with pytest.raises(ConfigurationError, match="needs a CUDA GPU"):
        TEFP8Precision(device="cpu")


@pytest.mark.skipif(is_transformer_engine_available(), reason="transformer-engine is installed")
def test_missing_transformer_engine_names_the_install_command():
    with pytest.raises(MissingDependencyError,
                       match=r'Install it with: pip install "transformer-engine\[pytorch\]"'):
        import_transformer_engine()


def test_missing_torchao_names_the_install_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "torchao", None)  # as if torchao were not installed
    monkeypatch.setitem(sys.modules, "torchao.float8", None)
    with pytest.raises(MissingDependencyError,
                       match=r'pip install "accel-precision\[torchao\]"'):
        build_precision("fp8", "cpu")


def test_fp8_recipe_kwargs_is_a_deprecated_alias_of_te_recipe_kwargs():
    with pytest.warns(FutureWarning, match="TERecipeKwargs"):
        recipe = FP8RecipeKwargs(margin=2, fp8_format="e4m3")
    assert isinstance(recipe, TERecipeKwargs)
    plain = recipe.to_te()
    assert type(plain) is TERecipeKwargs and plain.margin == 2 and plain.fp8_format == "E4M3"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        with pytest.raises(ConfigurationError, match="backend='MSAMP'"):
            FP8RecipeKwargs(backend="msamp")


@pytest.mark.parametrize("options, match", [
    ({"fp8_format": "E3M4"}, "fp8_format"),
    ({"amax_compute_algo": "mean"}, "amax_compute_algo"),
    ({"override_linear_precision": (True, False)}, "override_linear_precision"),
    ({"interval": 0}, "interval"),
])
def test_te_recipe_kwargs_are_validated(options, match):
    with pytest.raises(ConfigurationError, match=match):
        TERecipeKwargs(**options)


def test_recipe_and_autocast_kwargs_are_validated():
    from accel_precision import AutocastKwargs

    with pytest.raises(ConfigurationError, match="module_filter_func"):
        AORecipeKwargs(module_filter_func="first")
    with pytest.raises(ConfigurationError, match="cache_enabled"):
        AutocastKwargs(cache_enabled="no")
    with pytest.raises(TypeError):
        AutocastKwargs(False)  # keyword-only  # type: ignore[misc]
