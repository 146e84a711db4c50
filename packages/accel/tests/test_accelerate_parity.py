"""Facade behaviour that differed from Accelerate 1.15 (issue 24): join_uneven_inputs with
what cannot join, register_for_checkpointing's refusal, where TensorBoard's files go."""

from __future__ import annotations

import contextlib
import logging
import os
import types
import warnings
from unittest.mock import Mock

import pytest
import torch
from accel_state import DistributedType
from torch import nn

from accel import Accelerator, FullyShardedDataParallelPlugin
from accel.utils import ProjectConfiguration

ACCELERATE_WORDS = "only supported for multi-GPU"


# -- join_uneven_inputs ------------------------------------------------------------------------
class _FakeDDP(types.SimpleNamespace):
    """A strategy with two data-parallel ranks: join returns a context it records."""

    def join(self, joinables, *, enable):
        self.calls.append((list(joinables), enable))
        return contextlib.nullcontext() if self.can_join else None


def _with_two_ranks(accelerator, monkeypatch, can_join=True):
    fake = _FakeDDP(dp_size=2, name="ddp", calls=[], can_join=can_join,
                    distributed_type=DistributedType.MULTI_CPU)
    monkeypatch.setattr(accelerator, "_strategy", fake)
    return fake


def _run(accelerator, joinables, **kwargs):
    ran = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with accelerator.join_uneven_inputs(joinables, **kwargs):
            ran.append(True)
    return ran == [True], [str(w.message) for w in caught if w.category is UserWarning]


def test_join_with_models_that_are_not_ddp_warns_and_runs_the_block(monkeypatch):
    accelerator = Accelerator(cpu=True)
    fake = _with_two_ranks(accelerator, monkeypatch)
    for joinables in ([nn.Linear(2, 2)], [Mock()]):  # Mock: Accelerate's own test passes one
        ran, said = _run(accelerator, joinables, even_batches=False)
        assert ran and len(said) == 1 and ACCELERATE_WORDS in said[0], said
        assert "pass the models accelerator.prepare returned" in said[0]
    assert fake.calls == []


def test_join_takes_the_ddp_models_and_names_the_others(monkeypatch):
    accelerator = Accelerator(cpu=True)
    fake = _with_two_ranks(accelerator, monkeypatch)
    ddp = Mock(spec=nn.parallel.DistributedDataParallel)
    plain = nn.Linear(2, 2)
    ran, said = _run(accelerator, [ddp, plain], even_batches=False)
    assert ran and fake.calls == [([ddp], True)]
    assert len(said) == 1 and ACCELERATE_WORDS in said[0] and "['Linear']" in said[0]
    ran, said = _run(accelerator, [ddp], even_batches=True)
    assert ran and said == [] and fake.calls[-1] == ([ddp], False)


def test_join_under_a_strategy_without_join_warns_with_accelerates_words(monkeypatch):
    accelerator = Accelerator(cpu=True)
    _with_two_ranks(accelerator, monkeypatch, can_join=False)
    ran, said = _run(accelerator, [Mock(spec=nn.parallel.DistributedDataParallel)])
    assert ran and len(said) == 1 and ACCELERATE_WORDS in said[0] and "'ddp'" in said[0]


def test_join_in_one_process_warns_unless_the_run_is_plain(gloo_group):
    ran, said = _run(Accelerator(cpu=True), [nn.Linear(2, 2)], even_batches=False)
    assert ran and said == []
    accelerator = Accelerator(cpu=True, fsdp_plugin=FullyShardedDataParallelPlugin())
    assert accelerator.distributed_type == DistributedType.FSDP
    ran, said = _run(accelerator, [Mock()])
    assert ran and len(said) == 1 and ACCELERATE_WORDS in said[0]
    assert "one data-parallel process" in said[0]
