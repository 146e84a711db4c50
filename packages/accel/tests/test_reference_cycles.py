"""No reference cycles through an Accelerator: one dropped by its last user is freed at
once, not at the next ``gc.collect()`` (Accelerate's test_ensure_dataloader_gets_cleaned_up)."""

from __future__ import annotations

import gc
import pickle
import types
import weakref

from accel import Accelerator
from torch.utils.data import DataLoader


def _reaches(start: object, target: object, limit: int = 100_000) -> bool:
    """Whether ``target`` is reachable from ``start`` through object references (functions,
    classes and modules are not followed: they reach everything through their globals)."""
    seen, todo = set(), [start]
    while todo and len(seen) < limit:
        node = todo.pop()
        if node is target:
            return True
        if id(node) in seen or isinstance(node, (types.FunctionType, types.ModuleType, type)):
            continue
        seen.add(id(node))
        todo.extend(gc.get_referents(node))
    return False


def test_the_tracker_group_does_not_point_back_at_its_accelerator():
    accelerator = Accelerator(cpu=True)
    assert not _reaches(accelerator._tracker_group, accelerator)
    assert accelerator._tracker_group._is_main() is True  # still asks the state
    again = pickle.loads(pickle.dumps(accelerator))  # the group travels with it
    assert again._tracker_group._is_main() is True


def test_an_accelerator_and_its_loader_are_freed_without_gc_collect():
    gc.collect()
    gc.disable()
    try:
        accelerator = Accelerator(cpu=True)
        loader = accelerator.prepare_data_loader(DataLoader(list(range(16)), batch_size=4))
        iterator = iter(loader)
        assert next(iterator).tolist() == [0, 1, 2, 3]  # a pass left open
        refs = [weakref.ref(accelerator), weakref.ref(loader)]
        del accelerator, loader, iterator
        assert [ref() for ref in refs] == [None, None]
    finally:
        gc.enable()
