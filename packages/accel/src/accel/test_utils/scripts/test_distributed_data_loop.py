"""Uneven data across two processes: even batches, joins, resumable and picklable loaders.

accel's own version of the check Accelerate bundles at this path (its tests start it with
``accelerate launch --num_processes 2 .../test_distributed_data_loop.py``; it needs exactly
two processes). What it checks:

* ``even_batches=True`` (the default) pads the shorter rank with samples from the start so
  both ranks get the same number of full batches; ``even_batches=False`` does not;
* ``join_uneven_inputs`` lets the rank with fewer batches finish while the other trains on,
  overrides ``even_batches`` for its block only (map-style loaders; an iterable loader gets a
  warning, not an error), and warns instead of joining when the model is not DDP;
* a prepared ``Accelerator`` pickles and its state survives the round trip; a prepared
  loader pickles and its copy yields the same batches;
* every sample is seen exactly once with ``gather_for_metrics``, with worker processes,
  shuffling, a user ``BatchSampler`` and a ``BatchSampler`` passed as ``sampler``;
* ``split_batches`` cuts each batch between the ranks; ``skip_first_batches`` resumes a loader
  mid-epoch; the seedable sampler gives the same order for the same seed and epoch and a new
  one for another epoch, on every rank alike;
* a stateful loader (``use_stateful_dataloader``) resumes from its ``state_dict`` and from
  ``save_state``/``load_state`` with exactly the batches it had not yet yielded.

Any failure raises (exit status non-zero).
"""

from __future__ import annotations

import pickle
import tempfile
import warnings
from unittest.mock import Mock

import torch
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    Dataset,
    IterableDataset,
    RandomSampler,
    TensorDataset,
    default_collate,
)

from accel.accelerator import Accelerator, DataLoaderConfiguration
from accel.utils.dataclasses import DistributedType

NUM_ELEMENTS = 22
NUM_WORKERS = 2
BATCH_SIZE = 4


class DummyDataset(Dataset):
    """``NUM_ELEMENTS`` dicts; also answers a list of indices (a ``BatchSampler`` used as the
    loader's ``sampler`` hands whole batches of indices to ``__getitem__``)."""

    def __len__(self) -> int:
        return NUM_ELEMENTS

    def __getitem__(self, index):
        if isinstance(index, int):
            return self._item(index)
        return [self._item(i) for i in index]

    @staticmethod
    def _item(i: int) -> dict:
        return {"index": i, "label": i % 2, "random_augmentation": torch.rand(1).item()}


class DummyIterableDataset(IterableDataset):
    def __init__(self, data) -> None:
        self.data = data

    def __iter__(self):
        yield from self.data


def create_accelerator(even_batches: bool = True, **config) -> Accelerator:
    accelerator = Accelerator(dataloader_config=DataLoaderConfiguration(
        even_batches=even_batches, **config))
    assert accelerator.num_processes == 2, (
        f"this script expects two processes, got {accelerator.num_processes}: launch it with "
        "`accel launch --num_processes 2`")
    return accelerator


def create_dataloader(accelerator: Accelerator, dataset_size: int, batch_size: int,
                      iterable: bool = False, shuffle: bool = False):
    values = torch.as_tensor(range(dataset_size))
    if shuffle:
        values = values[torch.randperm(values.size(0))]
    dataset = DummyIterableDataset(values) if iterable else TensorDataset(values)
    return accelerator.prepare(DataLoader(dataset, batch_size=batch_size))


def expect_batch_sizes(accelerator: Accelerator, dataset_size: int, batch_size: int,
                       rank0: list[int], rank1: list[int]) -> None:
    loader = create_dataloader(accelerator, dataset_size, batch_size)
    sizes = [len(batch[0]) for batch in loader]
    expected = rank0 if accelerator.process_index == 0 else rank1
    assert sizes == expected, (f"{dataset_size} samples in batches of {batch_size}: rank "
                               f"{accelerator.process_index} got sizes {sizes}, not {expected}")


def check_even_batches() -> None:
    accelerator = create_accelerator()
    expect_batch_sizes(accelerator, 3, 1, [1, 1], [1, 1])  # one more batch, padded
    expect_batch_sizes(accelerator, 7, 2, [2, 2], [2, 2])  # a short batch, padded


def check_uneven_batches() -> None:
    accelerator = create_accelerator(even_batches=False)
    expect_batch_sizes(accelerator, 3, 1, [1, 1], [1])
    expect_batch_sizes(accelerator, 7, 2, [2, 2], [2, 1])


def check_join_uneven_inputs() -> None:
    accelerator = create_accelerator(even_batches=False)
    ddp_model = accelerator.prepare(torch.nn.Linear(1, 1))
    loader = create_dataloader(accelerator, dataset_size=3, batch_size=1)
    seen = []
    with accelerator.join_uneven_inputs([ddp_model]):
        for i, batch in enumerate(loader):
            ddp_model(batch[0].float()).sum().backward()
            seen.append(i)
    accelerator.wait_for_everyone()
    expected = [0, 1] if accelerator.process_index == 0 else [0]
    assert seen == expected, f"rank {accelerator.process_index} ran batches {seen}"


def check_join_overrides_even_batches() -> None:
    accelerator = create_accelerator(even_batches=True)
    ddp_model = accelerator.prepare(torch.nn.Linear(1, 1))
    train = create_dataloader(accelerator, dataset_size=3, batch_size=1)
    valid = create_dataloader(accelerator, dataset_size=3, batch_size=1)
    with accelerator.join_uneven_inputs([ddp_model], even_batches=False):
        inside = train.batch_sampler.even_batches, valid.batch_sampler.even_batches
    assert inside == (False, False), f"even_batches inside the join: {inside}"
    after = train.batch_sampler.even_batches, valid.batch_sampler.even_batches
    assert after == (True, True), f"even_batches not restored after the join: {after}"


def check_join_with_mixed_loaders() -> None:
    accelerator = create_accelerator(even_batches=True)
    ddp_model = accelerator.prepare(torch.nn.Linear(1, 1))
    create_dataloader(accelerator, dataset_size=3, batch_size=1, iterable=True)
    batches = create_dataloader(accelerator, dataset_size=3, batch_size=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with accelerator.join_uneven_inputs([ddp_model], even_batches=False):
            inside = batches.batch_sampler.even_batches
    assert inside is False and batches.batch_sampler.even_batches is True


def check_join_warns_for_iterable_loaders() -> None:
    accelerator = create_accelerator()
    ddp_model = accelerator.prepare(torch.nn.Linear(1, 1))
    create_dataloader(accelerator, dataset_size=3, batch_size=1, iterable=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with accelerator.join_uneven_inputs([ddp_model], even_batches=False):
            pass
    _expect_warning(caught, "only supported for map-style datasets")


def check_join_warns_without_ddp(accelerator: Accelerator) -> None:
    original = accelerator.state.distributed_type
    accelerator.state.distributed_type = DistributedType.FSDP
    ran = False
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with accelerator.join_uneven_inputs([Mock()]):
                ran = True
    finally:
        accelerator.state.distributed_type = original
    assert ran, "the join's block did not run"
    _expect_warning(caught, "only supported for multi-GPU")


def _expect_warning(caught, text: str) -> None:
    assert caught and issubclass(caught[-1].category, UserWarning), (
        f"expected a UserWarning about {text!r}, got {[str(w.message) for w in caught]}")
    assert text in str(caught[-1].message), str(caught[-1].message)


def check_pickling() -> None:
    accelerator = create_accelerator()
    loader = create_dataloader(accelerator, dataset_size=32, batch_size=4)
    restored = pickle.loads(pickle.dumps(accelerator))
    assert accelerator.state.__dict__ == restored.state.__dict__, "state changed in pickling"
    copy = pickle.loads(pickle.dumps(loader))
    original, copied = [b[0].tolist() for b in loader], [b[0].tolist() for b in copy]
    assert original == copied, f"a pickled loader yields {copied}, not {original}"


def check_every_sample_once(loader: DataLoader, accelerator: Accelerator, what: str) -> None:
    loader = accelerator.prepare(loader)
    seen = []
    for batch in loader:
        index, _ = accelerator.gather_for_metrics((batch["index"], batch["label"]))
        seen.extend(index.detach().cpu().tolist())
    assert sorted(seen) == list(range(NUM_ELEMENTS)), f"{what}: saw {sorted(seen)}"


def check_split_batches() -> None:
    accelerator = create_accelerator(split_batches=True)
    loader = create_dataloader(accelerator, dataset_size=16, batch_size=4)
    local = [b[0].tolist() for b in loader]
    start = 2 * accelerator.process_index
    expected = [list(range(i + start, i + start + 2)) for i in range(0, 16, 4)]
    assert local == expected, f"split_batches: rank {accelerator.process_index} got {local}"


def check_skip_first_batches() -> None:
    accelerator = create_accelerator()
    loader = create_dataloader(accelerator, dataset_size=24, batch_size=2)
    full = [b[0].tolist() for b in loader]
    rest = [b[0].tolist() for b in accelerator.skip_first_batches(loader, num_batches=2)]
    assert rest == full[2:], f"skip_first_batches(2) gave {rest}, the loader {full}"
    again = [b[0].tolist() for b in loader]
    assert again == full, "the original loader no longer starts at its first batch"


def check_seedable_sampler() -> None:
    accelerator = create_accelerator(use_seedable_sampler=True, data_seed=7)
    loader = accelerator.prepare(DataLoader(TensorDataset(torch.arange(16)), batch_size=2,
                                            shuffle=True))

    def epoch(number: int) -> list[int]:
        loader.set_epoch(number)
        return [i for (b,) in loader for i in b.tolist()]

    first, second, first_again = epoch(0), epoch(1), epoch(0)
    assert first == first_again, f"epoch 0 twice: {first} then {first_again}"
    assert first != second, "epochs 0 and 1 gave the same order"
    everyone = accelerator.gather(torch.tensor(first))
    assert sorted(everyone.tolist()) == list(range(16)), f"ranks overlap: {everyone.tolist()}"


def _stateful_resume(accelerator: Accelerator, iterable: bool, through_save_state: bool) -> None:
    """Record the batches after step 2, rewind to the state at step 2, compare."""
    old_config = accelerator.dataloader_config
    try:
        with tempfile.TemporaryDirectory() as folder:
            # a folder per rank, as Accelerate's script makes: each rank saves its own
            accelerator.dataloader_config = DataLoaderConfiguration(use_stateful_dataloader=True)
            loader = create_dataloader(accelerator, dataset_size=32 * accelerator.num_processes,
                                       batch_size=4, iterable=iterable, shuffle=True)
            unseen, saved = [], None
            for step, batch in enumerate(loader):
                if step == 2:
                    if through_save_state:
                        accelerator.save_state(folder)
                    else:
                        saved = loader.state_dict()
                if step > 2:
                    unseen.append(batch)
            expected = accelerator.gather(unseen)
            if through_save_state:
                accelerator.load_state(folder)
            else:
                loader.load_state_dict(saved)
            resumed = accelerator.gather(list(loader))
            what = (f"stateful {'iterable' if iterable else 'map-style'} loader resumed via "
                    f"{'save_state' if through_save_state else 'state_dict'}")
            assert len(resumed) == len(expected), (
                f"{what}: {len(resumed)} batches, expected {len(expected)}")
            for want, got in zip(expected, resumed, strict=True):
                for a, b in zip(want, got, strict=True):
                    assert torch.equal(a, b), f"{what}: batch {got}, expected {want}"
    finally:
        accelerator.dataloader_config = old_config


def main() -> None:
    accelerator = create_accelerator()
    torch.manual_seed(accelerator.process_index)
    say = accelerator.print
    say("Test that even_batches variable ensures uniform batches across processes")
    check_even_batches()
    say("Run tests with even_batches disabled")
    check_uneven_batches()
    say("Test joining uneven inputs")
    check_join_uneven_inputs()
    say("Test overriding even_batches when joining uneven inputs")
    check_join_overrides_even_batches()
    say("Test overriding even_batches for mixed dataloader types")
    check_join_with_mixed_loaders()
    say("Test overriding even_batches raises a warning for iterable dataloaders")
    check_join_warns_for_iterable_loaders()
    say("Test join with non DDP distributed raises warning")
    check_join_warns_without_ddp(accelerator)
    say("Test pickling an accelerator and a prepared dataloader")
    check_pickling()

    dataset = DummyDataset()
    say("Test DataLoader with shuffle=False")
    check_every_sample_once(DataLoader(dataset, batch_size=BATCH_SIZE, num_workers=NUM_WORKERS),
                            accelerator, "shuffle=False")
    say("Test DataLoader with shuffle=True")
    check_every_sample_once(DataLoader(dataset, shuffle=True, batch_size=BATCH_SIZE,
                                       num_workers=NUM_WORKERS), accelerator, "shuffle=True")
    say("Test DataLoader with batch_sampler")
    sampler = BatchSampler(RandomSampler(dataset), batch_size=BATCH_SIZE, drop_last=False)
    check_every_sample_once(DataLoader(dataset, batch_sampler=sampler, num_workers=NUM_WORKERS),
                            accelerator, "batch_sampler")
    say("Test DataLoader with sampler as an instance of `BatchSampler`")
    sampler = BatchSampler(RandomSampler(dataset), batch_size=BATCH_SIZE, drop_last=False)
    check_every_sample_once(DataLoader(dataset, sampler=sampler, batch_size=None,
                                       collate_fn=default_collate, num_workers=NUM_WORKERS),
                            accelerator, "BatchSampler as sampler")
    say("Test split_batches, skip_first_batches and the seedable sampler")
    check_split_batches()
    check_skip_first_batches()
    check_seedable_sampler()
    say("Test a stateful dataloader resumes from its state_dict and from save_state")
    for through_save_state in (False, True):
        for iterable in (True, False):
            _stateful_resume(accelerator, iterable, through_save_state)
    accelerator.end_training()


if __name__ == "__main__":
    main()
