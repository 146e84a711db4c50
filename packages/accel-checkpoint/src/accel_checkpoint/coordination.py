"""Who writes what when several processes save one checkpoint, without collectives.

Rank 0 writes the shared files and the manifest, every rank writes its own RNG states.
The ranks meet through the process group's key-value store rather than through
collectives, for two reasons: the store's waits take a timeout, and no rank blocks a
device stream. Rank 0 waits ``ACCEL_CHECKPOINT_PEER_TIMEOUT`` seconds (default 60) for
the others to arrive; if they never do (``save_state`` called on the main process only),
it commits the checkpoint alone and says so, instead of hanging the job. Ranks arriving
after such a solo commit write nothing and warn.
"""

from __future__ import annotations

import json
import uuid
import warnings
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
from accel_state import env

from accel_checkpoint.constants import TMP_INFIX
from accel_checkpoint.errors import CheckpointError

__all__ = ["Peers", "SaveRound"]

_DEFAULT_PEER_TIMEOUT = 60


class Peers:
    """This process's rank, the world size and the store they share (``None`` alone)."""

    def __init__(self, rank: int = 0, world_size: int = 1, store: Any = None) -> None:
        self.rank, self.world_size, self.store = rank, world_size, store

    @classmethod
    def current(cls) -> Peers:
        dist = torch.distributed
        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
            return cls()
        try:
            store = dist.distributed_c10d._get_default_store()
        except Exception as exc:  # a backend without a store: nothing to coordinate with
            raise CheckpointError("Cannot coordinate a multi-process checkpoint: the process "
                                  f"group has no key-value store ({exc}).") from None
        return cls(dist.get_rank(), dist.get_world_size(), store)

    @property
    def is_writer(self) -> bool:
        """Whether this rank writes the shared files and the manifest."""
        return self.rank == 0


def new_staging_dir(final: Path) -> Path:
    staging = final.parent / f"{final.name}{TMP_INFIX}{uuid.uuid4().hex[:12]}"
    staging.mkdir(parents=True)
    return staging


class SaveRound:
    """One save of one checkpoint path, seen from one rank.

    Rank 0: :meth:`begin` -> write -> :meth:`collect` -> commit -> :meth:`finish`.
    Others: :meth:`begin` -> write -> :meth:`publish` -> :meth:`wait_done`.
    """

    def __init__(self, final: Path, peers: Peers) -> None:
        self.final, self.peers = final, peers
        self.solo = peers.store is None
        self._prefix = ""
        if peers.store is not None:
            base = f"accel_checkpoint/{final.resolve()}"
            generation = peers.store.add(f"{base}/generation/{peers.rank}", 1)
            self._prefix = f"{base}/{generation}"

    def _key(self, *parts: object) -> str:
        return "/".join([self._prefix, *map(str, parts)])

    def begin(self) -> Path | None:
        """The staging directory to write into, or ``None`` if this rank must not write."""
        store, peers = self.peers.store, self.peers
        if peers.is_writer:
            staging = new_staging_dir(self.final)
            if store is not None:
                self.solo = not self._peers_arrived()
                if self.solo:
                    warnings.warn(
                        f"Only rank 0 entered the save of {self.final} within "
                        f"{self.peer_timeout()} s: committing it without the other ranks' RNG "
                        "states. Call save_state on every process (or raise "
                        "ACCEL_CHECKPOINT_PEER_TIMEOUT if they are just slow).", stacklevel=3)
                store.set(self._key("staging"), "" if self.solo else str(staging))
            return staging
        store.set(self._key("arrived", peers.rank), "1")
        staging = store.get(self._key("staging")).decode()
        if not staging:
            warnings.warn(f"Rank {peers.rank} entered the save of {self.final} after rank 0 "
                          "had committed it alone; this rank's RNG state is not in it.",
                          stacklevel=3)
            return None
        return Path(staging)

    @staticmethod
    def peer_timeout() -> int:
        """Seconds rank 0 waits for the others to enter a save."""
        return env.CHECKPOINT_PEER_TIMEOUT.get_int(_DEFAULT_PEER_TIMEOUT)

    def _peers_arrived(self) -> bool:
        keys = [self._key("arrived", r) for r in range(1, self.peers.world_size)]
        try:
            self.peers.store.wait(keys, timedelta(seconds=self.peer_timeout()))
        except RuntimeError:  # DistStoreError: timed out
            return False
        return True

    def everyone_arrived(self) -> bool:
        """For saves that need every rank (sharded): rank 0 waits up to the peer timeout
        for the others to enter; they announce themselves and return ``True``."""
        if self.peers.store is None:
            return True
        if not self.peers.is_writer:
            self.peers.store.set(self._key("arrived", self.peers.rank), "1")
            return True
        return self._peers_arrived()

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
        keys = [self._key("files", r) for r in range(1, self.peers.world_size)]
        store.wait(keys)
        results = []
        for rank, key in enumerate(keys, start=1):
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
        if not store.check([self._key("staging")]):  # failed before begin() published it
            store.set(self._key("staging"), "")
        store.set(self._key("done"), "ok" if error is None else f"{type(error).__name__}: {error}")

    def wait_done(self) -> None:
        """Non-zero rank: return once rank 0 has committed; raise if it failed."""
        outcome = self.peers.store.get(self._key("done")).decode()
        if outcome != "ok":
            raise CheckpointError(f"Rank 0 failed to commit {self.final}: {outcome}")
