"""Who writes what when several processes save one checkpoint, without collectives.

Rank 0 writes the shared files and the manifest, every rank writes its own RNG states.
The ranks meet through the process group's key-value store rather than through
collectives, for two reasons: the store's waits take a timeout, and no rank blocks a
device stream. Rank 0 waits ``ACCEL_CHECKPOINT_PEER_TIMEOUT`` seconds (default 60) for
the others to arrive; if they never do (``save_state`` called on the main process only),
it commits the checkpoint alone and says so, instead of hanging the job, and from then on
(the script saves on the main process only, as diffusers' examples do) it waits for nobody,
until a rank enters a save late. Ranks arriving after such a solo commit write nothing and
warn.

A rank that is *not* saving says so as soon as it reaches a sync point
(:func:`sync_point`: ``load_state``, ``wait_for_everyone``): it marks itself absent from
rank 0's pending save and waits for that save to be committed, so a main-only save
(``if is_main_process: save_state(...)`` then ``load_state(...)`` everywhere) costs what
an all-ranks save costs instead of the peer timeout, and the load never races the save.

A rank that saves *another path* than its writer at the same time (each rank into a
folder of its own, as a test with a per-process temporary folder does) is released by the
writer when the writer sees it waiting: it then saves its path alone, as a one-process
save (every object, its own RNG state), instead of waiting for a save of that path the
writer never starts.

With ``save_on_each_node`` (machines without a shared file system) each machine's local
rank 0 plays rank 0's part for the ranks of its machine: every machine gets a complete
checkpoint on its own disk, holding the RNG states of its own ranks. (On a shared file
system the machines would commit the same path in turn, and the last one would win.)
"""

from __future__ import annotations

import json
import time
import warnings
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
from accel_state import env
from accel_state.detect import detect_placement

from accel_checkpoint.errors import CheckpointError
from accel_checkpoint.targets import new_staging_dir

__all__ = ["Peers", "SaveRound", "sync_point"]

_DEFAULT_PEER_TIMEOUT = 60
#: writer rank -> key prefix of its last save, made alone (see SaveRound._nobody_expected)
_UNJOINED: dict[int, str] = {}
_ALONE_AGAIN = (
    "save_state committed on this rank alone without waiting: no other rank entered the "
    "previous save either (save_state is called on the main process only). The checkpoints "
    "hold no RNG state of the other ranks; call save_state on every process for an exact "
    "resume.")
_ABSENT = b"absent"
#: pauses between two looks of :func:`sync_point` at the store (doubling from first to max)
_SYNC_POLL_FIRST, _SYNC_POLL_MAX = 0.001, 0.1


class Peers:
    """This process's rank, the world size, the store they share (``None`` alone), and
    which ranks write together: ``writer`` writes the shared files and the manifest, and
    collects the RNG files of ``group`` (every rank; or, with ``save_on_each_node``, the
    ranks of its machine, whose writer is the machine's local rank 0)."""

    def __init__(self, rank: int = 0, world_size: int = 1, store: Any = None,
                 writer: int = 0, group: range | None = None) -> None:
        self.rank, self.world_size, self.store = rank, world_size, store
        self.writer = writer
        self.group = group if group is not None else range(world_size)

    @classmethod
    def current(cls, save_on_each_node: bool = False) -> Peers:
        dist = torch.distributed
        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
            return cls()
        try:
            store = dist.distributed_c10d._get_default_store()
        except Exception as exc:  # a backend without a store: nothing to coordinate with
            raise CheckpointError("Cannot coordinate a multi-process checkpoint: the process "
                                  f"group has no key-value store ({exc}).") from None
        rank, world = dist.get_rank(), dist.get_world_size()
        if not save_on_each_node:
            return cls(rank, world, store)
        # Launchers number the ranks of a machine contiguously (torchrun, SLURM's block
        # distribution, MPI's default mapping): its local rank 0 is rank - local_rank.
        placement = detect_placement()
        writer = rank - placement.local_rank
        group = range(writer, min(writer + max(placement.local_world_size, 1), world))
        return cls(rank, world, store, writer, group)

    @property
    def is_writer(self) -> bool:
        """Whether this rank writes the shared files and the manifest."""
        return self.rank == self.writer


class SaveRound:
    """One save of one checkpoint path, seen from one rank.

    Rank 0: :meth:`begin` -> write -> :meth:`collect` -> commit -> :meth:`finish`.
    Others: :meth:`begin` -> write -> :meth:`publish` -> :meth:`wait_done`.
    """

    def __init__(self, final: Path, peers: Peers) -> None:
        self.final, self.peers = final, peers
        self.solo = peers.store is None
        #: released by the writer to save this path alone (it was saving another one)
        self.own = False
        self._prefix = ""
        self._absent: list[int] = []
        self._released: list[int] = []  # absent: released to save their own paths
        if peers.store is not None:  # one round per writer: per machine with save_on_each_node
            base = f"accel_checkpoint/{final.resolve()}/{peers.writer}"
            generation = peers.store.add(f"{base}/generation/{peers.rank}", 1)
            self._prefix = f"{base}/{generation}"

    def _others(self) -> list[int]:
        """The ranks that write a part of this save (those marked absent do not)."""
        return [r for r in self.peers.group if r != self.peers.writer and r not in self._absent]

    def _key(self, *parts: object) -> str:
        return "/".join([self._prefix, *map(str, parts)])

    def begin(self) -> Path | None:
        """The staging directory to write into, or ``None`` if this rank must not write."""
        store, peers = self.peers.store, self.peers
        if peers.is_writer:
            staging = new_staging_dir(self.final)
            if store is not None:
                store.set(_pending_key(peers.writer), self._prefix)
                self._release_elsewhere()
                arrived = False
                if self._nobody_expected():
                    self.solo = True
                    warnings.warn(_ALONE_AGAIN, stacklevel=3)
                else:
                    arrived = self._peers_arrived()
                    self.solo = not arrived or (bool(self._absent) and not self._others())
                    only_released = arrived and set(self._absent) == set(self._released)
                    if self.solo and not only_released:
                        self._warn_solo(arrived)
                if arrived:  # (a rank saying it skips this save at a sync point cost nothing)
                    _UNJOINED.pop(peers.writer, None)
                else:  # nobody came: the next save waits for nobody
                    _UNJOINED[peers.writer] = self._prefix
                store.set(self._key("staging"), "" if self.solo else str(staging))
            return staging
        store.set(self._key("arrived", peers.rank), "1")
        if self._wait_for_writer():
            return self._save_alone()
        staging = store.get(self._key("staging")).decode()
        failed = store.get(self._key("done")).decode() if not staging and store.check(
            [self._key("done")]) else "ok"
        if failed != "ok":  # the writer could not even begin (its target was refused)
            raise CheckpointError(f"Rank {peers.writer} could not save {self.final}: {failed}")
        if not staging:
            warnings.warn(f"Rank {peers.rank} entered the save of {self.final} after rank "
                          f"{peers.writer} "
                          "had committed it alone; this rank's RNG state is not in it.",
                          stacklevel=3)
            return None
        return Path(staging)

    def _wait_for_writer(self) -> bool:
        """Non-writer: wait (announced as waiting for this path) until the writer starts this
        save (False) or releases this rank to save alone (True)."""
        store, peers = self.peers.store, self.peers
        waiting = _waiting_key(peers.writer, peers.rank)
        store.set(waiting, self._prefix)
        keys = [self._key("staging")], [self._key("own")]
        timeout = getattr(store, "timeout", None) or timedelta(minutes=30)
        deadline = time.monotonic() + timeout.total_seconds()
        pause = _SYNC_POLL_FIRST
        try:
            while not store.check(keys[0]):
                if store.check(keys[1]):
                    return True
                if time.monotonic() > deadline:
                    raise CheckpointError(
                        f"Rank {peers.rank} waited {timeout} for rank {peers.writer} to save "
                        f"{self.final} too: call save_state with the same path on every "
                        "process (or on the main process only).")
                time.sleep(pause)
                pause = min(pause * 2, _SYNC_POLL_MAX)
            return False
        finally:
            store.set(waiting, "")

    def _save_alone(self) -> Path:
        """This rank writes and commits the whole checkpoint at its path, as one process."""
        peers = self.peers
        warnings.warn(
            f"Rank {peers.rank} saves {self.final} on its own: rank {peers.writer} was saving "
            "another path meanwhile (each process saving into a folder of its own). It holds "
            "this rank's copy of every object and its RNG state only.", stacklevel=4)
        self.peers = Peers(peers.rank, peers.world_size, None, writer=peers.rank)
        self.solo = self.own = True
        return new_staging_dir(self.final)

    def _release_elsewhere(self) -> None:
        """Writer: the ranks waiting for a save of another path than this one are told to
        save it alone, and count as absent from this save."""
        store, base = self.peers.store, self._prefix.rsplit("/", 1)[0] + "/"
        for rank in self._others():
            key = _waiting_key(self.peers.writer, rank)
            other = store.get(key).decode() if store.check([key]) else ""
            if other and not other.startswith(base):
                store.set(f"{other}/own", "1")
                self._absent.append(rank)
                self._released.append(rank)

    def _warn_solo(self, arrived: bool) -> None:
        peers = self.peers
        why = (f"the other ranks went on without saving ({self._absent} reached a sync point)"
               if arrived else f"no other rank entered it within {self.peer_timeout()} s")
        warnings.warn(
            f"Rank {peers.rank} saved {self.final} alone: {why}. The checkpoint holds no RNG "
            f"state of ranks {[r for r in peers.group if r != peers.rank]}, so after "
            "load_state their random draws (dropout, augmentation) differ from an "
            "uninterrupted run; everything else is restored. Call save_state on every "
            "process for an exact resume.", stacklevel=4)

    def _nobody_expected(self) -> bool:
        """Whether this writer's previous save was made alone and no other rank entered it
        since (the script saves on the main process only, as diffusers' examples do): then
        nobody is waited for. A rank that entered it late proves the script saves on every
        rank, and waiting resumes."""
        last = _UNJOINED.get(self.peers.writer)
        if last is None:
            return False
        store = self.peers.store
        for rank in self.peers.group:
            key = f"{last}/arrived/{rank}"
            if rank != self.peers.writer and store.check([key]) and store.get(key) != _ABSENT:
                del _UNJOINED[self.peers.writer]
                return False
        return True

    @staticmethod
    def peer_timeout() -> int:
        """Seconds rank 0 waits for the others to enter a save."""
        return env.CHECKPOINT_PEER_TIMEOUT.get_int(_DEFAULT_PEER_TIMEOUT)

    def _peers_arrived(self) -> bool:
        """Wait until every other rank has entered this save or said it will not (it
        reached a sync point instead; :attr:`_absent` then lists it); False on timeout."""
        store = self.peers.store
        deadline = time.monotonic() + self.peer_timeout()
        pause = _SYNC_POLL_FIRST
        while True:  # polled: a rank waiting for another path's save is released meanwhile
            others = self._others()
            keys = [self._key("arrived", r) for r in others]
            if not keys or store.check(keys):
                break
            if time.monotonic() > deadline:
                return False
            time.sleep(pause)
            pause = min(pause * 2, _SYNC_POLL_MAX)
            self._release_elsewhere()
        self._absent += [r for r, key in zip(others, keys, strict=True)
                         if store.get(key) == _ABSENT]
        return True

    def everyone_arrived(self) -> bool:
        """For saves that need every rank (sharded): rank 0 waits up to the peer timeout
        for the others to enter; they announce themselves and return ``True``."""
        if self.peers.store is None:
            return True
        if not self.peers.is_writer:
            self.peers.store.set(self._key("arrived", self.peers.rank), "1")
            return True
        store = self.peers.store
        store.set(_pending_key(self.peers.writer), self._prefix)
        everyone = self._peers_arrived() and not self._absent
        if everyone:  # the rest of this save runs on collectives
            store.set(_pending_key(self.peers.writer), "")
        else:  # release the ranks that said they are not saving
            self.finish(CheckpointError("not every rank entered the save"))
        return everyone

    def publish(self, files: dict[str, Any], objects: dict[str, Any],
                error: BaseException | None = None) -> None:
        """Non-zero rank: hand the records of the files it wrote (or its error) to rank 0."""
        payload = ({"error": f"{type(error).__name__}: {error}"} if error is not None
                   else {"files": files, "objects": objects})
        self.peers.store.set(self._key("files", self.peers.rank), json.dumps(payload))

    def collect(self) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        """Rank 0: wait for every other rank's records; raise if one of them failed."""
        if self.solo:
            return []
        store = self.peers.store
        others = self._others()
        keys = [self._key("files", r) for r in others]
        store.wait(keys)
        results = []
        for rank, key in zip(others, keys, strict=True):
            payload = json.loads(store.get(key))
            if "error" in payload:
                raise CheckpointError(f"Rank {rank} failed to write its part of {self.final}: "
                                      f"{payload['error']}")
            results.append((payload["files"], payload["objects"]))
        return results

    def finish(self, error: BaseException | None = None) -> None:
        """Rank 0: tell the others the outcome (they wait for it before returning)."""
        store = self.peers.store
        if store is None:
            return
        store.set(self._key("done"), "ok" if error is None else f"{type(error).__name__}: {error}")
        if not store.check([self._key("staging")]):  # failed before begin() published it
            store.set(self._key("staging"), "")  # after "done": the others read why
        store.set(_pending_key(self.peers.writer), "")

    def wait_done(self) -> None:
        """Non-zero rank: return once rank 0 has committed; raise if it failed."""
        outcome = self.peers.store.get(self._key("done")).decode()
        if outcome != "ok":
            raise CheckpointError(f"Rank {self.peers.writer} failed to commit {self.final}: "
                                  f"{outcome}")


def _waiting_key(writer: int, rank: int) -> str:
    """Where a non-writer rank publishes the key prefix of the save it waits for ("" once
    it stops waiting)."""
    return f"accel_checkpoint/waiting/{writer}/{rank}"


def _pending_key(writer: int) -> str:
    """Where a writer publishes the key prefix of the save it is in ("" when none)."""
    return f"accel_checkpoint/pending/{writer}"


def sync_point(name: str, save_on_each_node: bool = False, peers: Peers | None = None) -> None:
    """Call on every rank where the ranks meet (``load_state``, ``wait_for_everyone``)
    *before* their collective: a rank that finds its writer inside a save marks itself
    absent from it and waits until that save is committed, so a save started on the writer
    alone commits at once instead of after the peer timeout, and a load that follows it
    reads the finished checkpoint. Returns when the writer reaches the same sync point (or,
    as a bound, after the peer timeout; the caller's collective then waits as it would).
    ``name`` tells sync points apart; each rank must pass them in the same order.
    ``peers``: this rank's view (default: from the process group)."""
    peers = peers if peers is not None else Peers.current(save_on_each_node)
    store = peers.store
    if store is None:
        return
    sequence = store.add(f"accel_checkpoint/sync/{name}/count/{peers.rank}", 1)
    arrival = f"accel_checkpoint/sync/{name}/{sequence}/{peers.writer}"
    if peers.is_writer:
        store.set(arrival, "1")
        return
    pending_key = _pending_key(peers.writer)
    deadline = time.monotonic() + SaveRound.peer_timeout()
    pause = _SYNC_POLL_FIRST
    while not store.check([arrival]):  # polled: a timed-out store wait logs a C++ warning
        if time.monotonic() > deadline:
            return
        time.sleep(pause)
        pause = min(pause * 2, _SYNC_POLL_MAX)
        prefix = store.get(pending_key).decode() if store.check([pending_key]) else ""
        # read the pending save first, then whether the writer has reached this sync point:
        # it publishes its arrival before any later save, so a save seen pending while it
        # has not arrived is one this rank skipped, never the next one it will join
        if store.check([arrival]):
            return
        if prefix and not store.check([f"{prefix}/arrived/{peers.rank}"]):
            store.set(f"{prefix}/arrived/{peers.rank}", _ABSENT.decode())
            # this rank skipped that save: its count of saves of that path catches up, so
            # its next save of the path joins the writer's next one
            base, generation = prefix.rsplit("/", 1)
            store.set(f"{base}/generation/{peers.rank}", generation)
            store.wait([f"{prefix}/done"])

