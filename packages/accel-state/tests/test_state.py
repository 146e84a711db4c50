"""Single-process behaviour of PartialState and GradientState (multi-process: tests/integration)."""

from __future__ import annotations

import pytest
import torch
from accel_state import (
    ConfigurationError,
    DistributedType,
    GradientState,
    PartialState,
    is_initialized,
)


def test_single_process_defaults():
    assert not is_initialized()
    state = PartialState(cpu=True)
    assert is_initialized() and state.initialized
    assert state.device == torch.device("cpu")
    assert state.distributed_type is DistributedType.NO
    assert (state.num_processes, state.process_index, state.local_process_index) == (1, 0, 0)
    assert state.is_main_process and state.is_local_main_process and state.is_last_process
    assert not state.use_distributed
    assert state.backend is None
    state.wait_for_everyone()  # no-op, must not need a process group
    assert "Num processes: 1" in repr(state)


def test_borg_shares_state_and_reset_forgets_it():
    first = PartialState(cpu=True)
    first.custom = 5
    assert PartialState().custom == 5
    PartialState._reset_state()
    assert not hasattr(PartialState(cpu=True), "custom")


def test_singletons_keep_their_attributes_in_a_plain_dict():
    """As in Accelerate (off XLA), ``SharedDict`` is ``dict`` itself: the borg singletons'
    shared ``__dict__`` is an exact dict, the only kind whose attribute reads CPython
    specialises (GradientState is read on every micro-step)."""
    from accel_state import SharedDict

    assert SharedDict is dict
    assert type(PartialState(cpu=True).__dict__) is dict
    assert type(GradientState().__dict__) is dict


def test_use_cpu_env_alias_forces_cpu(monkeypatch):
    monkeypatch.setenv("ACCELERATE_USE_CPU", "true")
    assert PartialState().device.type == "cpu"


def test_failed_setup_does_not_look_initialised(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    with pytest.raises(ConfigurationError, match="MASTER_ADDR"):
        PartialState(cpu=True)
    assert not is_initialized()


def test_bad_rank_is_reported(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "5")
    with pytest.raises(ConfigurationError, match="rank=5"):
        PartialState(cpu=True)


def test_bad_timeout_is_reported():
    with pytest.raises(ConfigurationError, match="timeout"):
        PartialState(cpu=True, timeout="soon")


def test_on_process_decorators_single_process(capsys):
    state = PartialState(cpu=True)
    calls = []
    state.on_main_process(lambda: calls.append("main"))()
    state.on_local_main_process(lambda: calls.append("local"))()
    state.on_last_process(lambda: calls.append("last"))()
    state.on_process(lambda: calls.append("p0"), process_index=0)()
    state.on_process(process_index=1)(lambda: calls.append("p1"))()
    state.on_local_process(local_process_index=0)(lambda: calls.append("l0"))()
    assert calls == ["main", "local", "last", "p0", "l0"]
    state.print("hello")
    assert capsys.readouterr().out == "hello\n"
    with state.main_process_first(), state.local_main_process_first():
        pass


@pytest.mark.parametrize(
    ("n", "expected"),
    [(2, [[0, 1, 2], [3, 4]]), (3, [[0, 1], [2, 3], [4]]), (5, [[0], [1], [2], [3], [4]])],
)
def test_split_between_processes_shares(n, expected):
    from accel_state.state import _split

    data = list(range(5))
    assert [_split(data, n, i, False) for i in range(n)] == expected
    padded = [_split(data, n, i, True) for i in range(n)]
    assert len({len(p) for p in padded}) == 1
    assert padded[-1][-1] == expected[-1][-1]  # padding repeats the share's last item


def test_split_between_processes_tensor_dict_and_errors():
    from accel_state.state import _split

    tensor = torch.arange(10).reshape(5, 2)
    assert torch.equal(_split(tensor, 2, 1, True), torch.tensor([[6, 7], [8, 9], [8, 9]]))
    shares = _split({"a": [1, 2, 3], "b": (4, 5, 6)}, 2, 0, False)
    assert shares == {"a": [1, 2], "b": (4, 5)}
    with pytest.raises(ConfigurationError, match="same length"):
        _split({"a": [1], "b": [1, 2]}, 2, 0, False)
    with pytest.raises(ConfigurationError, match="cannot split"):
        _split(3, 2, 0, False)
    with PartialState(cpu=True).split_between_processes([1, 2, 3]) as mine:
        assert mine == [1, 2, 3]


def test_gradient_state_tracks_dataloaders_and_plugin():
    from accel_state import GradientAccumulationPlugin

    assert GradientState(GradientAccumulationPlugin()).adjust_scheduler  # defaults count
    gs = GradientState(GradientAccumulationPlugin(num_steps=4, sync_each_batch=True))
    assert gs.sync_gradients and gs.num_steps == 4 and gs.adjust_scheduler and gs.sync_each_batch
    assert GradientState().num_steps == 4  # shared
    assert not gs.in_dataloader and gs.remainder == -1 and not gs.end_of_dataloader

    class Loader:
        end_of_dataloader = True
        remainder = 3

    outer, inner = object(), Loader()
    gs._add_dataloader(outer)
    gs._add_dataloader(inner)
    assert gs.active_dataloader is inner and gs.end_of_dataloader and gs.remainder == 3
    gs._remove_dataloader(inner)
    assert gs.active_dataloader is outer
    gs._remove_dataloader(outer)
    assert not gs.in_dataloader
    gs._set_sync_gradients(False)
    assert not GradientState().sync_gradients


def test_gradient_state_advance_marks_cycle_ends_and_the_dataloader_end():
    from accel_state import GradientAccumulationPlugin

    gs = GradientState(GradientAccumulationPlugin(num_steps=3))
    step, syncs = 0, []
    for _ in range(6):
        step = gs._advance(step)
        syncs.append(gs.sync_gradients)
    assert syncs == [False, False, True, False, False, True] and step == 6

    class Last:
        end_of_dataloader = True

    gs._add_dataloader(Last())
    assert gs._advance(1) == 0 and gs.sync_gradients  # the last batch always ends a cycle
    gs.plugin_kwargs["sync_with_dataloader"] = False
    assert gs._advance(1) == 2 and not gs.sync_gradients  # unless told not to


def test_gradient_accumulation_plugin_validates_num_steps():
    from accel_state import GradientAccumulationPlugin

    with pytest.raises(ConfigurationError, match="num_steps=0"):
        GradientAccumulationPlugin(num_steps=0)


def test_destroy_process_group_is_safe_without_a_group_and_destroys_the_default_one(tmp_path):
    """Accelerate's launched scripts end in ``state.destroy_process_group()``: it destroys
    the default group whoever created it, keeps a fork-launched one, and is a no-op
    without a group."""
    import torch.distributed as dist

    PartialState(cpu=True).destroy_process_group()  # no group: nothing to do
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0,
                            world_size=1)
    try:
        state = PartialState(cpu=True)
        sub = dist.new_group([0])
        state.destroy_process_group(sub)  # a given group: only that one goes
        assert dist.is_initialized()
        state.fork_launched = True  # the notebook launcher owns the default group
        state.destroy_process_group()
        assert dist.is_initialized()
        PartialState._reset_state()  # after a reset the method still works
        PartialState().destroy_process_group()
        assert not dist.is_initialized()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
