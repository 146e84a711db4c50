"""Iteration state of a prepared loader (:class:`DataLoaderStateMixin`): the pass bracket
that reports to ``GradientState``, the one-batch look-ahead behind ``end_of_dataloader``,
and the resumable position a checkpoint saves. Kept apart from the loader classes
(``accel_data.loaders``) so that each stays small and reads on its own."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from accel_state.errors import ConfigurationError
from accel_state.state import GradientState

from accel_data.rebatch import layout, rebatched
from accel_data.reshard import dealing, placement
from accel_data.samplers import decode_draw, encode_draw, get_sampler

__all__ = ["DataLoaderStateMixin"]

#: what ``next(iterator, _END)`` returns at the end of a pass (shared with the loaders)
_END = object()


class DataLoaderStateMixin:
    """Iteration state of a prepared loader: what a training loop reads and a checkpoint saves.

    ``end_of_dataloader``/``remainder`` describe the current pass; ``begin()``/``end()``
    bracket every pass and are the single place where a loader reports itself to the
    process-wide ``GradientState``. ``state_dict()``/``load_state_dict()`` capture the
    position (epoch, batches yielded, shuffle seed) so a resumed run continues with
    exactly the batches the uninterrupted run would have seen.
    """

    end_of_dataloader: bool = False
    # Real samples in the last global batch when it was padded (what gather_for_metrics
    # keeps of it); 0 when nothing was padded; -1 when unknown.
    remainder: int = -1
    iteration: int = 0  # epoch of the next pass; advanced after each complete pass
    _yielded: int = 0  # batches of epoch `iteration` handed out (skipped ones included)
    _skip_plan: tuple[int, int] | None = None  # (epoch, batches) to skip in that epoch only
    # (epoch, user batches) the shard leaves out before dealing that epoch: a position saved
    # by another number of processes that is not a whole number of this world's rounds
    _start_plan: tuple[int, int] | None = None
    _resumed = False  # the next pass continues one that load_state_dict() restored
    # Set when a pass hands out its last batch: the epoch is done even if the pass is then
    # abandoned (``break`` on the last batch) or never resumed. Identifies that pass.
    _pending_finish: object | None = None

    @property
    def gradient_state(self) -> GradientState:
        """The process-wide ``GradientState`` this loader reports to (Accelerate's
        ``DataLoaderShard.gradient_state``)."""
        return GradientState()

    def reset(self) -> None:
        """Forget the previous pass."""
        self.end_of_dataloader = False
        self.remainder = -1

    def begin(self) -> None:
        """A pass starts: become the active dataloader, reset, estimate ``remainder``."""
        self.reset()
        GradientState()._add_dataloader(self)
        self.remainder = self._expected_remainder()

    def _expected_remainder(self) -> int:
        """``remainder`` from the lengths, before the pass tells the exact value."""
        if getattr(self, "_drop_last_source", False):
            return -1
        if not getattr(self, "_pads", True):
            return 0
        try:
            total = self.total_dataset_length  # type: ignore[attr-defined]
            per_step = self.total_batch_size  # type: ignore[attr-defined]
        except TypeError:  # unsized dataset
            return -1
        return total % per_step if per_step else -1

    def end(self) -> None:
        """A pass ended (exhausted or abandoned): the enclosing loader, if any, is active again."""
        GradientState()._remove_dataloader(self)

    # -- resumable position ----------------------------------------------------------------
    def _pending_skip(self) -> int:
        """Batches the next pass skips: only if it is the epoch the skip was asked for."""
        plan = self._skip_plan
        return plan[1] if plan is not None and plan[0] == self.iteration else 0

    def _pending_start(self) -> int:
        """User batches the shard leaves out first in this epoch (see ``accel_data.reshard``)."""
        plan = self._start_plan
        return plan[1] if plan is not None and plan[0] == self.iteration else 0

    def _sync_start(self) -> None:
        """Give the shard the start of the coming pass (0 unless it resumes mid-round)."""
        target = dealing(self).start_target
        if target is not None and target is not self:
            target.start = self._pending_start()

    def set_skip_batches(self, num_batches: int) -> None:
        """Make the next pass of the current epoch start after ``num_batches`` batches."""
        if isinstance(num_batches, bool) or not isinstance(num_batches, int) or num_batches < 0:
            raise ConfigurationError(
                f"num_batches must be a non-negative int, got {num_batches!r}; pass how many "
                "batches of this epoch were already consumed.")
        self._skip_plan = (self.iteration, num_batches) if num_batches else None

    def state_dict(self) -> dict[str, Any]:
        """The position as plain data: ``epoch``, ``batches_yielded``, ``sampler_seed`` (a
        seedable sampler's) and, over torch's shuffling sampler, ``sampler_draw``: what the
        current pass's permutation was drawn from (a seed, or a generator state), or at an
        epoch boundary the state of the generator the next pass draws from. Mid-epoch also
        ``num_processes`` (what the batches are dealt over) and ``source_batches``: the
        batches of the user's DataLoader all processes together have consumed, which a
        loader of another world size continues after (``accel_data.reshard``), with
        ``batch_size`` (samples in one of them) and ``split_batches``, which a loader of
        another batch size converts (``accel_data.rebatch``).

        Taken mid-pass it is the batches handed out so far; taken on the last batch (or
        after it) it is the start of the next epoch.
        """
        epoch, done, start = self.iteration, self._yielded, self._pending_start()
        deal = dealing(self)
        sampler = get_sampler(self)  # type: ignore[arg-type]
        # a pass loaded but not iterated yet will redraw `_replay`; a started one drew it
        draw = getattr(sampler, "_replay", None)
        draw = draw if draw is not None else getattr(sampler, "pass_state", None)
        if not done:
            done = self._pending_skip()  # loaded but not iterated yet (else 0)
        if self._pending_finish is not None:  # the last batch is out: the epoch is done
            epoch, done, start = epoch + 1, 0, 0
        consumed = start + done * deal.per_step
        # mid-epoch, also when a loaded pass restarts the interrupted one from its start
        # (a position of another batch size that fills no batch of this one)
        mid = bool(consumed) or (self._resumed and self._pending_finish is None)
        state: dict[str, Any] = {"epoch": epoch, "batches_yielded": done}
        if mid:  # where another world size or batch size continues
            state.update(num_processes=deal.world, source_batches=consumed, **layout(self))
        seed = getattr(sampler, "initial_seed", None)
        if isinstance(seed, int):
            state["sampler_seed"] = seed
        if mid and draw is not None:
            state["sampler_draw"] = encode_draw(draw)
        elif not mid and hasattr(sampler, "replay") and sampler.generator is not None:
            # the next pass draws from this generator as it is now (the global RNG, the
            # other source, is the checkpoint's to restore)
            state["sampler_draw"] = encode_draw(sampler.generator.get_state())
        return state

    def load_state_dict(self, state_dict: dict[str, Any], *, position: bool = True) -> None:
        """Continue from ``state_dict``: the next pass resumes that epoch where it stopped.

        ``position=False``: the next pass is that epoch from its first batch instead, with
        the same shuffle (what Accelerate's ``load_state`` restores of a loader that is not
        stateful: the script skips the batches it has seen itself)."""
        if position:
            epoch, done, start, mid = self._checked_position(state_dict)
        else:  # a saved pass (mid-epoch) is replayed whole: same draw, nothing skipped
            epoch, done, _, _ = self._checked_position(
                {k: state_dict.get(k) for k in ("epoch", "batches_yielded")})
            mid = done > 0 or "source_batches" in state_dict
            done = start = 0
        self._start_plan = (epoch, start) if start else None
        self.set_epoch(epoch)  # type: ignore[attr-defined]
        self._yielded = 0
        self._skip_plan = (epoch, done) if done else None
        self._resumed = mid  # that pass drew its random numbers before the checkpoint
        seed = state_dict.get("sampler_seed")
        sampler = get_sampler(self)  # type: ignore[arg-type]
        if seed is not None and hasattr(sampler, "initial_seed"):
            sampler.initial_seed = int(seed)
        draw = state_dict.get("sampler_draw")
        if draw is not None and hasattr(sampler, "replay"):
            if mid:
                sampler.replay(decode_draw(draw))
            elif sampler.generator is not None:
                sampler.generator.set_state(decode_draw(draw))

    def _checked_position(self, state_dict: dict[str, Any]) -> tuple[int, int, int, bool]:
        """``(epoch, batches to skip, user batches the shard leaves out first, whether it
        is mid-epoch)`` of a saved state on this loader's world (the same world: the saved
        count; another: see ``accel_data.reshard``) and batch size (another: see
        ``accel_data.rebatch``). Reads and checks only (and warns where not exact)."""
        try:
            epoch, done = int(state_dict["epoch"]), int(state_dict["batches_yielded"])
            consumed = state_dict.get("source_batches")
            consumed = None if consumed is None else int(consumed)
            world = state_dict.get("num_processes")
            world = None if world is None else int(world)
        except (KeyError, TypeError, ValueError) as error:
            raise ConfigurationError(
                f"Not a dataloader state: {state_dict!r} lacks an int 'epoch' and "
                "'batches_yielded'; pass what this loader's state_dict() returned.") from error
        if (consumed is not None and consumed < 0) or (world is not None and world < 1):
            raise ConfigurationError(
                f"Not a dataloader state: source_batches={consumed!r} and num_processes="
                f"{world!r} must be a non-negative and a positive int; pass what this "
                "loader's state_dict() returned.")
        size, split = state_dict.get("batch_size"), state_dict.get("split_batches")
        if (size is not None and (isinstance(size, bool) or not isinstance(size, int)
                                  or size < 1)) or not isinstance(split, (bool, type(None))):
            raise ConfigurationError(
                f"Not a dataloader state: batch_size={size!r} and split_batches={split!r} "
                "must be a positive int (or None) and a bool; pass what this loader's "
                "state_dict() returned.")
        if consumed is None:  # saved by accel-data <= 0.2.0 (or at an epoch start)
            return epoch, done, 0, bool(done)
        mid = consumed > 0 or world is not None  # 0 with a world: a pass restarted
        if "batch_size" in state_dict:  # accel-data >= 0.2.2 records what a batch was
            consumed = rebatched(self, consumed, size, epoch)
        skip, start = placement(self, consumed, world, epoch)
        return epoch, skip, start, mid

    def _hand_out_last(self) -> object:
        """The last batch of this pass is about to be yielded: from now on the epoch is done."""
        token = object()
        self._pending_finish = token
        return token

    def _settle(self, token: object | None = None) -> None:
        """Count a pass whose last batch was handed out as finished (``token``: that pass
        only; ``None``: whichever is pending). Idempotent."""
        pending = self._pending_finish
        if pending is not None and (token is None or pending is token):
            self._finish_pass()

    def _look_ahead(self, batches: Iterator[Any], move: Callable[[Any], Any] | None,
                    before_last: Callable[[], None]) -> Iterator[Any]:
        """Yield ``batches`` one behind, so the last is known as such when it is handed out
        (``end_of_dataloader``); ``move`` (device placement) runs on each batch before the
        next one is fetched; ``before_last`` runs just before the last one is yielded. Ends
        the pass, and the state ``begin()`` opened, however the iteration stops."""
        token = None
        # the count goes straight into the instance dict: DataLoader's Python __setattr__
        # (which guards its own options) cost ~1 us per batch here
        attributes = self.__dict__
        attributes["_yielded"] = self._yielded
        try:
            current = next(batches, _END)
            if current is _END:  # an epoch with no batch is not counted (as in Accelerate)
                # unless all were skipped (or left out by a resume on another world size)
                self._finish_pass(advance=self._yielded > 0 or self._pending_start() > 0)
                return
            if move is not None:
                current = move(current)
            for upcoming in batches:
                attributes["_yielded"] += 1
                yield current
                current = upcoming if move is None else move(upcoming)
            before_last()
            self.end_of_dataloader = True
            self._yielded += 1
            token = self._hand_out_last()
            yield current
        finally:
            if token is not None:  # also when abandoned on the last batch
                self._settle(token)
            self.end()

    def _finish_pass(self, advance: bool = True) -> None:
        """A pass ran to its end: the next one is the next epoch (``advance``), from its
        start."""
        self._pending_finish = None
        self.iteration += int(advance)
        self._yielded = 0
        self._skip_plan = None
        self._start_plan = None
        self._sync_start()
        origin = getattr(self, "_origin", None)
        if origin is not None:  # a skip_first_batches copy finished the origin's epoch
            origin.iteration, origin._yielded = self.iteration, 0
