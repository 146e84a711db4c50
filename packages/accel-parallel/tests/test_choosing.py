"""Choosing a strategy: ``claims`` chooses, ``check`` runs on every route, the deprecated
``accepts`` still chooses, typed options, and nothing given is silently ignored."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Literal

import pytest
from accel_parallel import (
    STRATEGIES,
    DistributedDataParallelKwargs,
    SingleDeviceStrategy,
    Strategy,
    StrategyConfig,
    select_strategy,
)
from accel_parallel.choosing import RunEnvironment, Unmet
from accel_parallel.option_types import check_option_values, describe_fields
from accel_precision import NoPrecision
from accel_state import ConfigurationError


def _config(state, **kwargs) -> StrategyConfig:
    return StrategyConfig(state=state, precision=NoPrecision(device=state.device), **kwargs)


class Mode(enum.Enum):
    FAST = "fast"
    SAFE = "safe"


@dataclass
class TypedOptions:
    level: int = 1
    ratio: float = 0.5
    loud: bool = False
    tag: str = "plain"
    order: Literal["up", "down"] = "up"
    mode: Mode = Mode.SAFE
    limit: int | None = None
    names: list[str] | None = None


class NeedsGroup(Strategy):
    """Claims a ``"group"`` plugin; needs a process group to run."""

    name = "needs-group"
    priority = 100
    options_class = TypedOptions
    plugin_kinds = frozenset({"group"})

    @classmethod
    def claims(cls, config):
        return config.plugins.get("group") is not None

    @classmethod
    def check(cls, config, environment):
        if environment.process_group:
            return []
        return [Unmet(f"it needs a process group, and this run of "
                      f"{environment.num_processes} process(es) has none",
                      "launch it with accel launch --num_processes 2")]


class OldStyle(Strategy):
    """Written against the one-question interface: only ``accepts``."""

    name = "old-style"
    priority = 101

    @classmethod
    def accepts(cls, config):
        return "old" in config.plugins


@pytest.fixture
def registered():
    STRATEGIES.register("needs-group", NeedsGroup)
    STRATEGIES.register("old-style", OldStyle)
    yield
    STRATEGIES._clear()


_REFUSED = (r"^Strategy 'needs-group' \({route}\) cannot run here: it needs a process group, "
            r"and this run of 1 process\(es\) has none\. Fix: launch it with accel launch "
            r"--num_processes 2\.$")


def test_check_runs_on_every_route(state, registered, monkeypatch):
    with pytest.raises(ConfigurationError, match=_REFUSED.format(
            route=r"chosen by the configuration, priority 100")):
        select_strategy(_config(state, plugins={"group": True}))
    with pytest.raises(ConfigurationError, match=_REFUSED.format(
            route=r"named by Accelerator\(strategy=\.\.\.\)")):
        select_strategy(_config(state, requested="needs-group",
                                requested_by="Accelerator(strategy=...)"))
    with pytest.raises(ConfigurationError, match=_REFUSED.format(
            route=r"given as a Strategy instance")):
        select_strategy(_config(state, plugins={"strategy": NeedsGroup(state)}))
    monkeypatch.setenv("ACCEL_STRATEGY", "needs-group")
    with pytest.raises(ConfigurationError, match=_REFUSED.format(
            route=r"named by ACCEL_STRATEGY \(accel launch --strategy, a config file's "
                  r"strategy:\)")):
        select_strategy(_config(state))


def test_check_passes_where_the_environment_has_what_it_needs(state, registered):
    config = _config(state, plugins={"group": True})
    there = RunEnvironment(num_processes=2, device_type="cpu", process_group=True)
    assert NeedsGroup.check(config, there) == []
    assert NeedsGroup.claims(config) and not NeedsGroup.accepts(config)  # here: no group


def test_the_code_and_the_launcher_naming_two_strategies_is_refused(state, registered,
                                                                    monkeypatch):
    monkeypatch.setenv("ACCEL_STRATEGY", "single")
    with pytest.raises(ConfigurationError, match=r"Accelerator\(strategy=\.\.\.\) names "
                                                 r"strategy 'needs-group', but named by "
                                                 r"ACCEL_STRATEGY .* names 'single'"):
        select_strategy(_config(state, requested="needs-group",
                                requested_by="Accelerator(strategy=...)"))
    same = select_strategy(_config(state, requested="SINGLE"))
    assert type(same) is SingleDeviceStrategy


def test_an_instance_and_a_name_for_another_strategy_are_refused(state, registered,
                                                                 monkeypatch):
    monkeypatch.setenv("ACCEL_STRATEGY", "needs-group")
    with pytest.raises(ConfigurationError, match=r"^A ready SingleDeviceStrategy was given, but "
                                                 r"named by ACCEL_STRATEGY .* names strategy "
                                                 r"'needs-group': name one"):
        select_strategy(_config(state, plugins={"strategy": SingleDeviceStrategy(state)}))
    monkeypatch.setenv("ACCEL_STRATEGY", "single")  # the instance's own name: agreed
    ready = SingleDeviceStrategy(state)
    assert select_strategy(_config(state, plugins={"strategy": ready})) is ready


def test_a_strategy_written_against_accepts_is_still_chosen(state, registered):
    from accel_parallel import choosing

    choosing._warned.discard(OldStyle)  # warned once per class
    with pytest.warns(DeprecationWarning, match=r"OldStyle overrides Strategy.accepts"):
        assert type(select_strategy(_config(state, plugins={"old": True}))) is OldStyle
    assert OldStyle.claims(_config(state, plugins={"old": True}))
    assert not OldStyle.claims(_config(state))


def test_typed_options_are_checked_field_by_field():
    checked = check_option_values(TypedOptions, {"level": 3, "ratio": 2, "mode": "FAST",
                                                 "limit": None, "names": ["a"]},
                                  what="strategy 'x'", source="--strategy_config")
    assert checked == {"level": 3, "ratio": 2.0, "mode": Mode.FAST, "limit": None,
                       "names": ["a"]}
    cases = {
        "level": ("3", r"level='3' .* TypedOptions.level expects an integer"),
        "ratio": (True, r"ratio=True .* expects a number"),
        "loud": ("yes", r"loud='yes' .* expects true or false"),
        "tag": (3, r"tag=3 .* expects a string"),
        "order": ("sideways", r"order='sideways' .* expects one of 'up', 'down'"),
        "mode": ("slow", r"mode='slow' .* expects one of 'fast', 'safe'"),
        "limit": (1.5, r"limit=1.5 .* expects an integer or null"),
        "names": ("a", r"names='a' .* expects a list or null"),
    }
    for key, (value, message) in cases.items():
        with pytest.raises(ConfigurationError, match=r"^--strategy_config gives " + message):
            check_option_values(TypedOptions, {key: value}, what="strategy 'x'",
                                source="--strategy_config")
    with pytest.raises(ConfigurationError, match=r"'levle', which strategy 'x' \(TypedOptions\)"
                                                 r" does not take; its options: level, ratio"):
        check_option_values(TypedOptions, {"levle": 1}, what="strategy 'x'", source="S")
    listed = {f.name: (f.type, f.default) for f in describe_fields(TypedOptions)}
    assert listed["order"] == ("one of 'up', 'down'", "'up'")
    assert listed["mode"] == ("one of 'fast', 'safe'", "'safe'")


def test_named_options_are_typed_for_builtins_and_third_parties(state, registered):
    with pytest.raises(ConfigurationError, match=r"gives level='high' for strategy "
                                                 r"'needs-group', but TypedOptions.level "
                                                 r"expects an integer"):
        select_strategy(_config(state, requested="needs-group", options={"level": "high"}))
    with pytest.raises(ConfigurationError, match=r"bucket_cap_mb='big' for strategy 'ddp', but "
                                                 r"DistributedDataParallelKwargs.bucket_cap_mb "
                                                 r"expects an integer"):
        select_strategy(_config(state, requested="ddp", options={"bucket_cap_mb": "big"}))
    assert DistributedDataParallelKwargs in [STRATEGIES.get("ddp").options_type()]
    assert STRATEGIES.get("fsdp").options_type().__name__ == "FullyShardedDataParallelPlugin"
    assert STRATEGIES.get("nd").options_type().__name__ == "ParallelismConfig"
    assert STRATEGIES.get("deepspeed").options_type().__name__ == "DeepSpeedPlugin"
    assert STRATEGIES.get("single").options_type() is None


def test_fsdp_options_by_data_build_its_plugin(state):
    import torch.distributed as dist

    try:
        strategy = select_strategy(_config(state, requested="fsdp",
                                           options={"reshard_after_forward": False}))
    finally:  # FSDP2 made a one-process group of its own
        if dist.is_initialized():
            dist.destroy_process_group()
    assert strategy.plugin.reshard_after_forward is False
    with pytest.raises(ConfigurationError, match=r"min_num_params='many' for strategy 'fsdp'"):
        select_strategy(_config(state, requested="fsdp", options={"min_num_params": "many"}))


def test_a_plugin_the_chosen_strategy_does_not_run_with_is_refused(state, registered):
    from accel_parallel import FullyShardedDataParallelPlugin

    with pytest.raises(ConfigurationError, match=r"^The fsdp plugin \(fsdp_plugin= or accel "
                                                 r"launch --use_fsdp\) is not used: strategy "
                                                 r"'single' \(named by StrategyConfig\(requested"
                                                 r"=\.\.\.\)\) does not run with it; strategies "
                                                 r"that do: fsdp, nd, pipeline\. Drop the plugin"):
        select_strategy(_config(state, requested="single",
                                plugins={"fsdp": FullyShardedDataParallelPlugin()}))


def test_a_handler_no_chosen_strategy_takes_is_named(state, registered):
    @dataclass
    class GroupKwargs:
        size: int = 2

    class Grouped(NeedsGroup):
        name = "grouped"
        priority = 102
        handler_kinds = {"grouped": GroupKwargs}

    STRATEGIES.register("grouped", Grouped)
    with pytest.raises(ConfigurationError, match=r"^kwargs_handlers=\[GroupKwargs\(\.\.\.\)\] "
                                                 r"is not used: strategy 'single' \(named by "
                                                 r".*\) does not take it; strategies that do: "
                                                 r"grouped\. Drop the handler"):
        select_strategy(_config(state, requested="single", handlers={"grouped": GroupKwargs()}))
    # Accelerate ignores a DistributedDataParallelKwargs no strategy uses: accel warns
    with pytest.warns(UserWarning, match=r"kwargs_handlers=\[DistributedDataParallelKwargs"
                                         r"\(\.\.\.\)\] is not used: strategy 'single' \(chosen "
                                         r"by the configuration, priority 0\) does not take it; "
                                         r"strategies that do: ddp, nd"):
        chosen = select_strategy(_config(state, handlers={"ddp": DistributedDataParallelKwargs()}))
    assert type(chosen) is SingleDeviceStrategy
