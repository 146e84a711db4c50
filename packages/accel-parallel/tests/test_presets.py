"""Presets (a registered name = a strategy + fixed options) and options given by data
(``StrategyConfig.options`` / ``ACCEL_STRATEGY_CONFIG``), as the registry resolves them."""

from __future__ import annotations

import importlib.util

import pytest
from accel_parallel import (
    STRATEGIES,
    DDPStrategy,
    StrategyConfig,
    StrategyPreset,
    resolve_name,
    select_strategy,
    strategy_handler_kinds,
    strategy_presets,
)
from accel_precision import NoPrecision
from accel_state import ConfigurationError

needs_deepspeed = pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None,
                                     reason="needs deepspeed (pip install \"accel[deepspeed]\")")


def _config(state, **kwargs) -> StrategyConfig:
    return StrategyConfig(state=state, precision=NoPrecision(device=state.device), **kwargs)


def test_the_builtin_presets_are_registered_beside_the_strategies():
    assert {"zero1", "zero2", "zero3"} <= set(STRATEGIES.names())
    found = strategy_presets()
    assert {name: p.options for name, p in found.items() if name.startswith("zero")} == {
        "zero1": {"zero_stage": 1}, "zero2": {"zero_stage": 2}, "zero3": {"zero_stage": 3}}
    assert all(p.strategy == "deepspeed" and p.description for p in found.values())
    assert resolve_name("ddp") == (DDPStrategy, None)
    assert resolve_name("ZERO3")[0].name == "deepspeed"
    strategy_handler_kinds()  # presets are not asked for handler kinds (nor by data)


def test_a_preset_names_a_strategy_never_another_preset():
    STRATEGIES.register("chained-test", StrategyPreset("zero3", {}))
    try:
        with pytest.raises(ConfigurationError, match=r"Preset 'chained-test' builds 'zero3', "
                                                     r"which is not a strategy class"):
            resolve_name("chained-test")
    finally:
        STRATEGIES._clear()


@needs_deepspeed
@pytest.mark.parametrize("stage", [1, 2, 3])
def test_zero_presets_build_the_plugin_code_would(state, stage):
    from accel_parallel import DeepSpeedPlugin
    from accel_parallel.plugins import resolve_deepspeed

    strategy = select_strategy(_config(state, requested=f"zero{stage}"))
    assert type(strategy).__name__ == "DeepSpeedStrategy"
    assert strategy.plugin.zero_stage == stage
    coded = select_strategy(_config(state, plugins={
        "deepspeed": resolve_deepspeed(DeepSpeedPlugin(zero_stage=stage), None)}))
    assert strategy.plugin.deepspeed_config == coded.plugin.deepspeed_config
    assert strategy.plugins_in_use["deepspeed"]["default"] is strategy.plugin


@needs_deepspeed
def test_preset_options_merge_and_a_code_plugin_wins(state):
    from accel_parallel import DeepSpeedPlugin
    from accel_parallel.plugins import resolve_deepspeed

    merged = select_strategy(_config(state, requested="zero2",
                                     options={"gradient_clipping": 0.5}))
    assert (merged.plugin.zero_stage, merged.plugin.gradient_clipping) == (2, 0.5)
    coded = resolve_deepspeed(DeepSpeedPlugin(zero_stage=1), None)
    with pytest.warns(UserWarning, match=r"preset 'zero3' gives DeepSpeed options "
                                         r"\{'zero_stage': 3\}, but a DeepSpeed plugin was "
                                         r"given .*: that plugin is used"):
        kept = select_strategy(_config(state, requested="zero3", plugins={"deepspeed": coded}))
    assert kept.plugin.zero_stage == 1


@needs_deepspeed
def test_preset_option_errors_name_the_preset_and_the_source(state):
    with pytest.raises(ConfigurationError, match=r"Preset 'zero3' fixes zero_stage=3, but "
                                                 r"StrategyConfig\(options=\.\.\.\) sets "
                                                 r"zero_stage=2"):
        select_strategy(_config(state, requested="zero3", options={"zero_stage": 2}))
    with pytest.raises(ConfigurationError, match=r"preset 'zero3' with StrategyConfig\(options"
                                                 r"=\.\.\.\) gives option\(s\) 'stage', which "
                                                 r"strategy 'zero3' \(DeepSpeedPlugin\) does "
                                                 r"not take; its options: .*zero_stage"):
        select_strategy(_config(state, requested="zero3", options={"stage": 3}))


def test_options_need_a_strategy_that_takes_them(state):
    with pytest.raises(ConfigurationError, match=r"strategy 'single' takes none"):
        select_strategy(_config(state, requested="single", options={"level": 1}))
    with pytest.raises(ConfigurationError, match=r"but no strategy is named"):
        select_strategy(_config(state, options={"level": 1}))
    assert type(select_strategy(_config(state, requested="single", options={}))).__name__ \
        == "SingleDeviceStrategy"
