"""Pipeline parallelism in one process: the configuration, the stage plan and the shells."""

from __future__ import annotations

import pytest
import torch
from accel_parallel import ParallelismConfig
from accel_parallel.pipeline import PipelineParallelConfig
from accel_parallel.pipeline.split import build_shell, merge_shells, plan_stages
from accel_state import ConfigurationError
from torch import nn


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.tanh(self.fc(x))


class Inner(nn.Module):
    def __init__(self, depth: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.layers = nn.ModuleList(Block() for _ in range(depth))
        self.act = nn.GELU()  # no parameters: kept on every stage (as rotary embeddings)
        self.norm = nn.LayerNorm(4)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.embed(ids)
        for layer in self.layers:
            h = layer(self.act(h))
        return self.norm(h)


class Outer(nn.Module):
    """transformers' layout: the blocks one level down (``model.layers``), the head outside."""

    def __init__(self, depth: int = 5) -> None:
        super().__init__()
        self.model = Inner(depth)
        self.head = nn.Linear(4, 3)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.model(ids))


def test_config_defaults_env_and_errors(monkeypatch) -> None:
    config = PipelineParallelConfig()
    assert (config.schedule, config.stages_per_rank, config.microbatches(2)) == ("1f1b", 1, 2)
    interleaved = PipelineParallelConfig(schedule="Interleaved-1F1B")
    assert (interleaved.schedule, interleaved.stages(2), interleaved.microbatches(2)) == (
        "interleaved_1f1b", 4, 4)
    monkeypatch.setenv("PARALLELISM_CONFIG_PP_SCHEDULE", "gpipe")
    monkeypatch.setenv("ACCEL_PARALLELISM_CONFIG_PP_NUM_MICROBATCHES", "8")
    config = ParallelismConfig(pp_size=2)
    assert (config.pp_handler.schedule, config.pp_handler.num_microbatches) == ("gpipe", 8)
    assert config.sizes["pp"] == 2 and config.total_size == 2 and config.pp_enabled
    assert list(config.sizes)[0] == "pp"  # the outermost mesh dimension
    monkeypatch.setenv("PARALLELISM_CONFIG_PP_SIZE", "4")
    assert ParallelismConfig().pp_size == 4
    with pytest.raises(ConfigurationError, match="schedule='zb'.*gpipe, 1f1b, interleaved_1f1b"):
        PipelineParallelConfig(schedule="zb")
    with pytest.raises(ConfigurationError, match="runs one stage per rank"):
        PipelineParallelConfig(schedule="gpipe", stages_per_rank=2)
    with pytest.raises(ConfigurationError, match="num_microbatches=0"):
        PipelineParallelConfig(num_microbatches=0)
    with pytest.raises(ConfigurationError, match="split_points='layers.2'"):
        PipelineParallelConfig(split_points="layers.2")
    with pytest.raises(ConfigurationError, match="loss_fn=3"):
        PipelineParallelConfig(loss_fn=3)
    with pytest.raises(ConfigurationError, match="pp_handler"):
        ParallelismConfig(pp_size=2, pp_handler={"schedule": "gpipe"})


def test_plan_even_uneven_and_manual() -> None:
    model = Outer(depth=5)
    plan = plan_stages(model, 2)
    assert plan.path == "model.layers"  # found: the largest ModuleList
    assert plan.stage_keys == (("0", "1", "2"), ("3", "4"))
    manual = plan_stages(model, 3, split_points=["model.layers.1", "model.layers.4"])
    assert manual.stage_keys == (("0",), ("1", "2", "3"), ("4",))
    with pytest.raises(ConfigurationError, match="names 1 split point.*3 stages need 2"):
        plan_stages(model, 3, split_points=["model.layers.1"])
    with pytest.raises(ConfigurationError, match="'layers.1' is not a block of Outer"):
        plan_stages(model, 2, split_points=["layers.1"])
    with pytest.raises(ConfigurationError, match="must be increasing"):
        plan_stages(model, 3, split_points=["model.layers.3", "model.layers.2"])
    with pytest.raises(ConfigurationError, match="5 block.*fewer than the 8 pipeline stages"):
        plan_stages(model, 8)
    with pytest.raises(ConfigurationError,
                       match=r"layers='head'\) does not name a ModuleList of Outer \(found Linear"):
        plan_stages(model, 2, path="head")


def test_models_it_cannot_split_name_the_model_and_the_fix() -> None:
    with pytest.raises(ConfigurationError, match="cannot split Sequential: it has no ModuleList"):
        plan_stages(nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2)), 2)
    model = Outer()
    model.model.scale = nn.Parameter(torch.ones(1))
    with pytest.raises(ConfigurationError, match="Inner on the path.*parameters of its own"):
        plan_stages(model, 2)


def test_shells_run_the_whole_model_stage_by_stage_with_the_original_names() -> None:
    torch.manual_seed(0)
    model = Outer(depth=5)
    ids = torch.randint(0, 10, (2, 3))
    expected = model(ids)
    plan = plan_stages(model, 3)
    shells = [build_shell(model, plan.path, keys, first=s == 0, last=s == 2)
              for s, keys in enumerate(plan.stage_keys)]
    hidden = ids
    for shell in shells:
        hidden = shell(hidden)
    torch.testing.assert_close(hidden, expected, rtol=0, atol=0)
    names = [set(dict(shell.named_parameters())) for shell in shells]
    assert names[0] == {"model.embed.weight", "model.layers.0.fc.weight", "model.layers.0.fc.bias",
                        "model.layers.1.fc.weight", "model.layers.1.fc.bias"}
    assert "head.weight" in names[2] and "model.norm.weight" in names[2]
    assert set().union(*names) == set(dict(model.named_parameters()))
    assert isinstance(shells[1].model.embed, nn.Identity) and shells[1].model.act is model.model.act
    # the original model is untouched
    assert len(model.model.layers) == 5 and isinstance(model.head, nn.Linear)
    # this rank's view (stages 0 and 2, as interleaving gives rank 0 of 2)
    local = merge_shells(model, plan.path, [(shells[0], True, False), (shells[2], False, True)])
    assert list(dict(local.named_parameters())) == [
        n for n in dict(model.named_parameters()) if ".layers.2." not in n
        and ".layers.3." not in n]
    assert local.model.layers._modules["4"] is model.model.layers[4]
