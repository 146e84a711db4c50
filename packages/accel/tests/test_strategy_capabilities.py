"""The facade asks the strategy, never compares its run type (issue 40.6): Accelerate's
``is_fsdp2`` (on the Accelerator and on ``AcceleratorState``) and
``is_composable_parallelism_enabled`` are the strategy's ``shards_parameters``, so a
strategy whose answer differs from what its ``DistributedType`` suggests is believed."""

from __future__ import annotations

import pytest
from accel import Accelerator
from accel.state import AcceleratorState
from accel_parallel import SingleDeviceStrategy
from accel_state import DistributedType, PartialState


class _ShardsOnItsOwn(SingleDeviceStrategy):
    """Says it shards parameters although its run type is Accelerate's ``NO``."""

    @property
    def shards_parameters(self) -> bool:
        return True


class _FSDPTypeWithoutShards(SingleDeviceStrategy):
    """Reports the ``FSDP`` run type but holds whole parameters."""

    @property
    def distributed_type(self) -> DistributedType:
        return DistributedType.FSDP

    @property
    def shards_parameters(self) -> bool:
        return False


@pytest.mark.parametrize(("strategy_class", "shards"), [
    (SingleDeviceStrategy, False), (_ShardsOnItsOwn, True), (_FSDPTypeWithoutShards, False)])
def test_is_fsdp2_is_the_strategys_answer(strategy_class, shards) -> None:
    accelerator = Accelerator(cpu=True, strategy=strategy_class(PartialState(cpu=True)))
    assert accelerator.is_fsdp2 is shards
    assert accelerator.is_composable_parallelism_enabled is shards
    assert AcceleratorState().is_fsdp2 is shards


def test_the_default_answer_follows_accelerates_run_type() -> None:
    class FSDPType(SingleDeviceStrategy):
        @property
        def distributed_type(self) -> DistributedType:
            return DistributedType.FSDP

    state = PartialState(cpu=True)
    assert FSDPType(state).shards_parameters and not SingleDeviceStrategy(state).shards_parameters
    assert SingleDeviceStrategy(state).replicates_parameters
    assert not FSDPType(state).replicates_parameters


def test_a_state_read_after_a_reset_says_so() -> None:
    state = Accelerator(cpu=True).state
    AcceleratorState._reset_state()
    with pytest.raises(AttributeError, match="is_fsdp2"):  # not a silent False
        state.is_fsdp2  # noqa: B018 - the read is the test
