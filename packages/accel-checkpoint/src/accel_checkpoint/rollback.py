"""A load that fails part-way changes nothing: what it changed is put back.

A load reads and checks everything it can before the first object changes (files and
digests, keys and shapes, parameter groups: :mod:`accel_checkpoint.applying`). What can
still fail after that fails with some objects already holding the new values: a
scheduler's or a registered object's own ``load_state_dict``, a dataloader position that
does not fit, an RNG state torch refuses, a model's own loader, a writer's load. So every
object is *kept* just before its first change, the cheapest exact way for its kind, and
when the load raises, every kept object is put back (newest first) and the error goes on
unchanged, with a note saying so (:func:`all_or_nothing`).

What keeping costs (and what it restores):

- a scheduler, dataloader position, grad scaler, registered object: a copy of its
  ``state_dict()`` (small: containers rebuilt, tensors cloned, other objects kept by
  reference), put back through its own ``load_state_dict``;
- the RNG states: a copy of this process's generators' states (a few KiB);
- a torch optimizer whose load is torch's own: nothing is copied. torch's
  ``load_state_dict`` replaces ``state`` and ``param_groups`` with new objects, so keeping
  the old ones (and shallow copies of their dicts) restores them exactly, step counts
  included. With ``copy=True`` (for loads that write into the state tensors in place, as
  DCP does) the state tensors are also copied to CPU memory;
- a model: a CPU copy of its parameters and buffers (and of its modules' extra state),
  put back in place into the very tensors it holds. Loads keep only the models whose load
  cannot be checked in full (:func:`~accel_checkpoint.applying.apply_states`), so most
  loads copy no model at all.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import os
from collections.abc import Callable, Iterator
from typing import Any

import torch
from accel_state.random import capture_rng_state, restore_rng_state
from torch import nn

__all__ = ["Rollback", "all_or_nothing", "current_rollback", "agree_on", "settle_agreement",
           "module_of"]

_CURRENT: contextvars.ContextVar[Rollback | None] = contextvars.ContextVar(
    "accel_checkpoint_rollback", default=None)
_RNG = object()  # what keep_rng keeps, among the objects kept


def module_of(obj: Any) -> tuple[nn.Module, bool] | None:
    """``(module, strict)`` for a model (an ``nn.Module``, or a wrapper with
    ``checked_module() -> (module, strict)``), else ``None``."""
    if isinstance(obj, nn.Module):
        return obj, True
    checked = getattr(obj, "checked_module", None)
    return checked() if callable(checked) else None


def _local(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor whose memory holds the values on this rank (a DTensor's local shard)."""
    to_local = getattr(tensor, "to_local", None)
    return to_local() if callable(to_local) else tensor


def _copy_values(tensors: list[torch.Tensor]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``(live, CPU copy)`` for each distinct, materialised tensor (tied ones once)."""
    seen: set[int] = set()
    kept = []
    with torch.no_grad():
        for tensor in tensors:
            local = _local(tensor)
            if id(tensor) in seen or local.is_meta:
                continue
            seen.add(id(tensor))
            kept.append((local, local.detach().to("cpu", copy=True)))
    return kept


def _put_values(kept: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
    with torch.no_grad():
        for live, saved in kept:
            live.copy_(saved)


def _plain_copy(value: Any) -> Any:
    """A copy of a state: containers rebuilt, tensors cloned, scalars as they are; any other
    object is kept by reference (a deep copy would run its own ``__reduce__``/``__deepcopy__``
    code, and state dicts hold plain data)."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, dict):
        copied = copy.copy(value)  # the same mapping type (OrderedDict, defaultdict)
        copied.clear()
        copied.update((key, _plain_copy(item)) for key, item in value.items())
        return copied
    if isinstance(value, (list, tuple, set, frozenset)) and type(value) in (
            list, tuple, set, frozenset):
        return type(value)(_plain_copy(item) for item in value)
    array_copy = getattr(value, "copy", None)
    if hasattr(value, "__array__") and callable(array_copy):  # a numpy array
        return array_copy()
    return value


def _innermost(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """The optimizer that holds the state (wrappers keep theirs in ``.optimizer``)."""
    while isinstance(getattr(optimizer, "optimizer", None), torch.optim.Optimizer):
        optimizer = optimizer.optimizer
    return optimizer


class Rollback:
    """What a load changed, kept before the change, to put back if the load fails."""

    def __init__(self) -> None:
        self._undo: list[tuple[str, Callable[[], None]]] = []
        self._kept: set[int] = set()
        self.copied_bytes = 0
        """Bytes of tensors copied to keep the objects (models; optimizers with ``copy``)."""

    def __len__(self) -> int:
        return len(self._undo)

    def _first(self, obj: Any) -> bool:
        if id(obj) in self._kept:
            return False
        self._kept.add(id(obj))
        return True

    def keep(self, obj: Any, *, copy: bool = False) -> None:
        """Keep ``obj`` as it is now (once: later calls for it do nothing). ``copy``: an
        optimizer's state tensors are also copied (its load writes into them in place)."""
        target = getattr(obj, "loads_into", obj)  # a wrapper that loads into another object
        module = module_of(target)
        if module is not None:
            target = module[0]
        if not self._first(target):
            return
        if module is not None:
            self._keep_module(target)
        elif isinstance(target, torch.optim.Optimizer):
            self._keep_optimizer(target, copy)
        else:
            self._keep_state(target)

    def keep_rng(self) -> None:
        """Keep this process's RNG states (python, numpy, torch, accelerators)."""
        if self._first(_RNG):
            saved = capture_rng_state()
            self._undo.append(("the RNG states", lambda: restore_rng_state(saved)))

    def _keep_module(self, module: nn.Module) -> None:
        slots = [(sub, table, name, tensor) for sub in module.modules()
                 for table in (sub._parameters, sub._buffers)
                 for name, tensor in table.items() if tensor is not None]
        values = _copy_values([tensor for *_, tensor in slots])
        self.copied_bytes += sum(saved.nbytes for _, saved in values)
        extra = [(sub, _plain_copy(sub.get_extra_state())) for sub in module.modules()
                 if type(sub).get_extra_state is not nn.Module.get_extra_state]

        def undo() -> None:
            for _, table, name, tensor in slots:  # a load that assigned new tensors
                table[name] = tensor
            _put_values(values)
            for sub, state in extra:
                sub.set_extra_state(state)
        self._undo.append((f"model {type(module).__name__}", undo))

    def _keep_optimizer(self, optimizer: torch.optim.Optimizer, copy_tensors: bool) -> None:
        base = _innermost(optimizer)
        if type(base).load_state_dict is not torch.optim.Optimizer.load_state_dict:
            self._keep_state(optimizer)  # a load of its own: keep what it says its state is
            return
        state, groups = base.state, base.param_groups
        entries = [(param, per_param, dict(per_param)) for param, per_param in state.items()]
        group_copies = [(group, dict(group)) for group in groups]
        group_list = list(groups)
        values: list[tuple[torch.Tensor, torch.Tensor]] = []
        if copy_tensors:
            values = _copy_values([t for _, per_param, _ in entries
                                   for t in per_param.values() if isinstance(t, torch.Tensor)])
            self.copied_bytes += sum(saved.nbytes for _, saved in values)

        def undo() -> None:
            for per_param_entry in entries:
                per_param_entry[1].clear()
                per_param_entry[1].update(per_param_entry[2])
            state.clear()
            state.update({param: per_param for param, per_param, _ in entries})
            for group, contents in group_copies:
                group.clear()
                group.update(contents)
            groups[:] = group_list
            base.state, base.param_groups = state, groups
            _put_values(values)
        self._undo.append((f"optimizer {type(base).__name__}", undo))

    def _keep_state(self, obj: Any) -> None:
        backup = _plain_copy(obj.state_dict())
        self._undo.append((type(obj).__name__, lambda: obj.load_state_dict(backup)))

    def restore(self) -> list[str]:
        """Put every kept object back, newest first; what could not be put back, as text."""
        failed = []
        for what, undo in reversed(self._undo):
            try:
                undo()
            except Exception as exc:  # the others are still put back
                failed.append(f"{what} ({type(exc).__name__}: {exc})")
        self._undo.clear()
        self._kept.clear()
        return failed


def _note(error: BaseException, kept: int, failed: list[str]) -> None:
    if not hasattr(error, "add_note") or not kept:  # Python 3.10: no notes
        return
    if failed:
        error.add_note(f"The failed load had already changed {kept} object(s); these could not "
                       f"be put back and hold what the load left in them: {'; '.join(failed)}. "
                       "Every other object was put back as it was before the load.")
    else:
        error.add_note(f"The failed load had already changed {kept} object(s); each was put "
                       "back as it was before the load: nothing was changed.")


def current_rollback() -> Rollback | None:
    """The :class:`Rollback` of the load running here (``None`` outside one)."""
    return _CURRENT.get()


@contextlib.contextmanager
def all_or_nothing() -> Iterator[Rollback]:
    """Run a load in which every object is :meth:`Rollback.keep`-t before it changes: if it
    raises, the kept objects are put back and the error goes on (with a note). Nested uses
    join the outermost one, which puts everything back."""
    outer = _CURRENT.get()
    if outer is not None:
        yield outer
        return
    rollback = Rollback()
    token = _CURRENT.set(rollback)
    try:
        yield rollback
    except BaseException as error:
        kept = len(rollback)
        _note(error, kept, rollback.restore())
        raise
    finally:
        _CURRENT.reset(token)


class _Agreement:
    """The ranks' one exchange of how a part of a load went (each rank gathers once)."""

    def __init__(self, path: str | os.PathLike[str], on: bool) -> None:
        self.path, self.on, self.done = path, on, False

    def settle(self, error: BaseException | None) -> None:
        """Tell every rank this rank's outcome; raise this rank's error, or one naming the
        first rank that failed."""
        from accel_checkpoint.errors import CheckpointError
        from accel_checkpoint.rank_writers import gather

        self.done = True
        found = gather(None if error is None else f"{type(error).__name__}: {error}", self.on)
        if error is not None:
            raise error
        failed = next(((rank, what) for rank, what in enumerate(found) if what), None)
        if failed is not None:
            raise CheckpointError(f"Rank {failed[0]} could not load {self.path} ({failed[1]}), "
                                  "so no rank keeps any of it.")


_AGREEMENT: contextvars.ContextVar[_Agreement | None] = contextvars.ContextVar(
    "accel_checkpoint_agreement", default=None)


def agree_on(path: str | os.PathLike[str], on: bool, step: Callable[[], Any]) -> Any:
    """Run ``step`` (a part of a load) on every rank and return what it returns; raise on
    every rank if it failed on any: this rank's own error, or one naming the rank that
    failed. Inside :func:`all_or_nothing` each rank then puts back what it had changed. The
    ranks exchange their outcome once: at the end, or earlier where ``step`` calls
    :func:`settle_agreement` (before writes that cannot fail and are not kept), and a rank
    that failed never leaves the others waiting in a later collective."""
    agreement = _Agreement(path, on)
    token = _AGREEMENT.set(agreement)
    try:
        try:
            result = step()
        except Exception as exc:  # every rank is told before anyone raises
            if agreement.done:
                raise
            agreement.settle(exc)
        if not agreement.done:
            agreement.settle(None)
        return result
    finally:
        _AGREEMENT.reset(token)


def settle_agreement() -> None:
    """Inside :func:`agree_on`: exchange the outcome now (this rank succeeded so far), before
    writes that cannot fail and are not kept — a later failure on another rank could not
    be put back after them. Raises if any rank failed; outside one, does nothing."""
    agreement = _AGREEMENT.get()
    if agreement is not None and not agreement.done:
        agreement.settle(None)
