"""Prepared loaders built on torchdata's ``StatefulDataLoader`` (``use_stateful_dataloader``).

The class is made on first use, so ``import accel_data`` never imports torchdata. Its
``state_dict()`` is torchdata's own state (sampler iterator, workers, a ``Stateful``
dataset), taken when the last *yielded* batch was fetched (the one-batch look-ahead would
otherwise save a position one batch too far), plus accel's position keys next to it. So,
as with Accelerate, a state saved here loads into a plain ``StatefulDataLoader`` and the
other way round.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from typing import Any

from accel_state.imports import require

__all__ = ["stateful_class"]

_CLASSES: dict[type, type] = {}
#: accel-data's own keys in a stateful loader's state (the rest is torchdata's)
_OURS = frozenset({"epoch", "batches_yielded", "num_processes", "source_batches",
                   "batch_size", "split_batches", "sampler_seed", "sampler_draw",
                   "dataloader"})
#: torchdata's state of a single-process iterator that has yielded nothing
_FRESH = {"_index_sampler_state": None, "_sampler_iter_state": None,
          "_sampler_iter_yielded": 0, "_num_yielded": 0, "_IterableDataset_len_called": None,
          "_shared_seed": None, "fetcher_state": None, "dataset_state": None,
          "_iterator_finished": False}


def _inner_state(loader: Any, state: dict[str, Any]) -> dict[str, Any] | None:
    """torchdata's state matching ``state``'s position: the one taken when the last yielded
    batch was fetched (the look-ahead has fetched one more); at an epoch boundary that of a
    fresh iterator, built without starting one (that would draw a seed or start workers)."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    states = getattr(loader, "_states", None)
    if state["batches_yielded"]:
        if states and loader._yielded == state["batches_yielded"]:
            ahead = _batches_per_step(loader)  # what the look-ahead has read beyond
            if loader.end_of_dataloader or len(states) <= ahead:
                return states[-1]
            return states[-1 - ahead]
        return None
    if loader._iterator is not None and states:
        return StatefulDataLoader.state_dict(loader)  # the finished pass's own state
    return dict(_FRESH) if loader.num_workers == 0 else None


def _batches_per_step(loader: Any) -> int:
    """Batches of the wrapped loader one step reads: a dispatcher without split_batches
    reads one per process (on its reading rank), everything else one."""
    if hasattr(loader, "_open_base") and not loader.split_batches:
        return loader.num_processes
    return 1


def _says_nothing_more(state: dict[str, Any]) -> bool:
    """Whether accel's position adds nothing to torchdata's state: the first epoch, on one
    process, without a seeded or replayed shuffle. torchdata's state alone is then the
    whole position, and it is returned alone, equal to Accelerate's (and to a plain
    ``StatefulDataLoader``'s), which code written for Accelerate compares against."""
    return (state.get("epoch") == 0 and state.get("num_processes", 1) == 1
            and "sampler_seed" not in state and "sampler_draw" not in state)


def _refuse_other_layout(loader: Any, state: dict[str, Any]) -> None:
    """torchdata's state is one process's place in its own shard, counted in its own
    batches: refuse it mid-epoch on another number of processes, batch size or
    ``split_batches`` (where it would repeat or skip samples)."""
    from accel_state.errors import ConfigurationError

    from accel_data.rebatch import layout
    from accel_data.reshard import dealing

    saved, consumed = state.get("num_processes"), state.get("source_batches")
    if saved is None or not consumed:
        return
    now = {"num_processes": dealing(loader).world, **layout(loader)}
    changed = [f"{key}={state[key]!r} (now {value!r})" for key, value in now.items()
               if key in state and state[key] != value]
    if not changed:
        return
    raise ConfigurationError(
        f"This StatefulDataLoader state was saved after {consumed} batches of epoch "
        f"{state.get('epoch')} with {', '.join(changed)}: torchdata's own state holds one "
        "process's position in its shard, in its batches, which does not carry over to "
        "another number of processes, batch size or split_batches (samples would repeat or "
        f"be skipped). Resume with the saved {', '.join(k.split('=')[0] for k in changed)}, "
        "or prepare the DataLoader with use_stateful_dataloader=False: accel's own position "
        "is then carried over, in samples (torchdata's worker and dataset state is not "
        "restored).")


def stateful_class(base: type) -> type:
    """``base`` (a ``DataLoaderShard`` class) mixed with torchdata's ``StatefulDataLoader``."""
    if base in _CLASSES:
        return _CLASSES[base]
    require("torchdata", extra="torchdata", dist="accel-data",
            feature="use_stateful_dataloader=True")
    from torchdata.stateful_dataloader import StatefulDataLoader

    def _open(self: Any, skip: int) -> tuple[Iterator[Any], int]:
        iterator, to_read = base._open(self, skip)
        self._states = deque(maxlen=2)
        return _tracking(self, iterator), to_read

    def _open_base(self: Any, skip: int) -> tuple[Iterator[Any], int]:
        # a dispatcher's reading rank reads here (it never calls _open)
        iterator, discard = base._open_base(self, skip)
        self._states = deque(maxlen=1 + _batches_per_step(self))
        return _tracking(self, iterator), discard

    def _tracking(self: Any, iterator: Iterator[Any]) -> Iterator[Any]:
        for batch in iterator:
            self._states.append(StatefulDataLoader.state_dict(self))
            yield batch

    def state_dict(self: Any) -> dict[str, Any]:
        state = base.state_dict(self)
        inner = _inner_state(self, state)
        if inner is None:
            return state
        # torchdata's own keys at the top level (what Accelerate's state_dict is), ours next
        # to them where they say more: either loader loads the other's state
        inner = {**inner, "_iterator_finished": bool(self.end_of_dataloader)}
        return inner if _says_nothing_more(state) else {**inner, **state}

    def load_state_dict(self: Any, state_dict: dict[str, Any]) -> None:
        inner = {k: v for k, v in state_dict.items() if k not in _OURS}
        inner = state_dict.get("dataloader", inner)  # states saved by accel-data <= 0.1.6
        if inner:
            _refuse_other_layout(self, state_dict)
        if "epoch" in state_dict:
            base.load_state_dict(self, state_dict)
        if inner:
            StatefulDataLoader.load_state_dict(self, inner)
            self._skip_plan = None  # torchdata's own state resumes the position
            done = 0 if inner.get("_iterator_finished") else inner.get("_num_yielded", 0)
            self.__dict__["_resume_offset"] = int(done or 0)

    def __getstate__(self: Any) -> dict[str, Any]:
        # torchdata keeps its live iterator, which cannot be pickled: drop it (a plain
        # DataLoader keeps none either), so the loader pickles as Accelerate's do
        return {**self.__dict__, "_iterator": None}

    cls = type(f"Stateful{base.__name__}", (base, StatefulDataLoader), {
        "__getstate__": __getstate__,
        "__doc__": f"{base.__name__} on torchdata's StatefulDataLoader.",
        "__module__": __name__, "_open": _open, "state_dict": state_dict,
        **({"_open_base": _open_base} if hasattr(base, "_open_base") else {}),
        "load_state_dict": load_state_dict, "use_stateful_dataloader": True})
    _CLASSES[base] = cls
    globals().setdefault(cls.__name__, cls)  # pickle finds it by name (see __getattr__)
    return cls


#: the stateful variants pickle can ask for before any was made in this process
_BASES = {"StatefulDataLoaderShard": ("accel_data.loaders", "DataLoaderShard"),
          "StatefulDataLoaderDispatcher": ("accel_data.dispatcher", "DataLoaderDispatcher"),
          "StatefulSkipDataLoader": ("accel_data.skip", "SkipDataLoader")}


def __getattr__(name: str) -> type:
    """Make a stateful variant on demand, so a pickled stateful loader loads anywhere
    (Accelerate's prepared loaders pickle too)."""
    if name not in _BASES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    module, base = _BASES[name]
    return stateful_class(getattr(importlib.import_module(module), base))
