"""Forward-only calls of a pipelined model, in one process: what is refused before anything
runs, and the helpers that cut, score and share the outputs (the 2-process runs are in
tests/integration/scripts/pipeline_train.py)."""

from __future__ import annotations

import re

import pytest
import torch
from accel_parallel.pipeline import PipelineParallelConfig
from accel_parallel.pipeline import model as pipeline_model
from accel_parallel.pipeline.evaluate import batch_key, mean_loss, share_output, split_micro
from accel_parallel.pipeline.model import PipelinedModel, PipelineTopology, build_schedule
from accel_state import ConfigurationError
from torch import nn


def mse(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return ((output - target) ** 2).mean()


def pipelined(evaluation_only: bool = False, **config) -> PipelinedModel:
    module = nn.Linear(4, 4)
    return PipelinedModel(module, [module], PipelineTopology(None, 0, 1, 1),
                          PipelineParallelConfig(num_microbatches=2, **config),
                          torch.device("cpu"), "Linear", ["weight", "bias"],
                          evaluation_only=evaluation_only)


def test_interleaved_evaluation_without_schedule_eval_names_the_torch_version(monkeypatch):
    monkeypatch.setattr(pipeline_model, "schedules_have_eval", lambda: False)
    config = PipelineParallelConfig(schedule="interleaved_1f1b")
    stages = [nn.Linear(2, 2), nn.Linear(2, 2)]
    version = re.escape(torch.__version__)
    with pytest.raises(ConfigurationError, match=r"interleaved pipeline .*needs torch>=2\.9 "
                                                 rf".*this is torch {version}"):
        build_schedule(stages, PipelineTopology(None, 0, 2, 4), config, torch.device("cpu"),
                       mse, forward_only=True)


@pytest.mark.parametrize("context", ["no_grad", "eval", "evaluation_mode"])
def test_forward_only_calls_are_checked_before_anything_runs(context):
    model = pipelined(evaluation_only=context == "evaluation_mode")
    if context == "eval":
        model.eval()
    x = torch.randn(4, 4)
    with torch.no_grad() if context == "no_grad" else torch.enable_grad():
        with pytest.raises(ConfigurationError, match="target= but has no loss function"):
            model(x, target=x)
        with pytest.raises(ConfigurationError, match="A batch of 3 sample.* 2 pipeline micro"):
            model(x[:3])
    assert model._schedules == {}  # nothing was built


def test_backward_of_a_forward_only_loss_says_how_to_train():
    model = pipelined(loss_fn=mse)
    loss = torch.tensor(1.0)
    loss._accel_pipeline_eval = id(model)
    assert model.owns(loss)
    with pytest.raises(ConfigurationError, match=r"forward-only call of Linear .*model\.train"):
        model.consume(loss)


def test_training_calls_keep_their_refusals_and_grad_mode_no_longer_refuses():
    model = pipelined(loss_fn=mse)
    with pytest.raises(ConfigurationError, match="target=labels"):
        model(torch.randn(4, 4))  # training mode, gradients on: a training call


def test_outputs_are_cut_scored_and_keyed_as_the_schedule_cuts_them():
    out, target = torch.arange(8.0).view(4, 2), torch.zeros(4, 2)
    parts = split_micro((out, [out]), 2)
    assert len(parts) == 2 and torch.equal(parts[1][0], out[2:]) and isinstance(parts[1][1],
                                                                                 list)
    want = (mse(out[:2], target[:2]) + mse(out[2:], target[2:])) / 2
    assert torch.allclose(mean_loss(out, target, mse, 2), want)
    assert batch_key((out,), {"flag": True}, None) != batch_key((out[:2],), {"flag": True},
                                                                None)
    assert batch_key((out,), {}, target) == batch_key((out.clone(),), {}, target.clone())


def test_one_stage_shares_its_output_as_it_is():
    topology = PipelineTopology(None, 0, 1, 1)
    out = (torch.ones(2),)
    assert share_output(out, topology, torch.device("cpu"), "M") is out
