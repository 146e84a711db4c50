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


# -- TensorBoard's folder ----------------------------------------------------------------------
@pytest.mark.parametrize("where", ["project_dir", "logging_dir"])
def test_tensorboard_files_go_to_logging_dir_slash_project_name(tmp_path, caplog, where):
    pytest.importorskip("tensorboard")
    if where == "project_dir":
        accelerator = Accelerator(cpu=True, log_with="tensorboard", project_dir=tmp_path / "P")
        parent = tmp_path / "P"
    else:
        config = ProjectConfiguration(project_dir=str(tmp_path / "P"),
                                      logging_dir=str(tmp_path / "L"))
        accelerator = Accelerator(cpu=True, log_with="tensorboard", project_config=config)
        parent = tmp_path / "L"
    with caplog.at_level(logging.INFO, logger="accel.tracking"):
        accelerator.init_trackers("proj", config={"lr": 0.1})
        accelerator.log({"loss": torch.tensor(1.0)}, step=0)
        accelerator.end_training()
    tracker = accelerator.get_tracker("tensorboard", unwrap=False)
    assert (tracker.logging_dir_param, tracker.logging_dir) == \
        (os.fspath(parent), os.path.join(parent, "proj"))
    assert list((parent / "proj").glob("events.out.tfevents.*"))
    said = [r.getMessage() for r in caplog.records if "event files" in r.getMessage()]
    assert len(said) == 1 and str(parent / "proj") in said[0]


# -- register_for_checkpointing ----------------------------------------------------------------
class _Counter:
    def __init__(self) -> None:
        self.count = 0

    def state_dict(self):
        return {"count": self.count}

    def load_state_dict(self, state):
        self.count = state["count"]


class _Proxy:
    """Forwards every attribute (as wrappers do): Accelerate's hasattr check accepts it."""

    def __init__(self, inner) -> None:
        self._inner = inner

    def __getattr__(self, name):
        return getattr(self._inner, name)


class _SaveOnly:
    def state_dict(self):
        return {}


def test_register_for_checkpointing_refuses_as_accelerate(tmp_path):
    accelerator = Accelerator(cpu=True)
    with pytest.raises(ValueError) as error:
        accelerator.register_for_checkpointing(_Counter(), object(), _SaveOnly, 3)
    message = str(error.value)
    assert message.startswith(
        "All `objects` must include a `state_dict` and `load_state_dict` function to be stored. "
        "The following inputs are invalid:\n\t- Item at index 1, `object`\n"
        "\t- Item at index 2, `_SaveOnly`\n\t- Item at index 3, `int`\n")
    assert accelerator._custom_objects == []  # nothing registered when one is refused


def test_register_for_checkpointing_takes_a_forwarding_proxy(tmp_path):
    accelerator = Accelerator(cpu=True)
    counter = _Counter()
    accelerator.register_for_checkpointing(_Proxy(counter))
    counter.count = 7
    accelerator.save_state(tmp_path / "ckpt")
    counter.count = 0
    accelerator.load_state(tmp_path / "ckpt")
    assert counter.count == 7
