"""Read the next offloaded block's weights on a background thread while this one runs.

Accelerate's offload hooks load each block's weights when its forward starts, so reading
(disk, or a copy from CPU RAM to the GPU) and computing never overlap. A ``Prefetcher`` is
shared by the offloading hooks of one model: it learns the order the hooks run in during
the first forward, and from then on, when block *i* starts, it submits the loading of
block *i+1* to one worker thread; block *i+1*'s hook takes the result instead of reading.
At most one block is read ahead, so the extra memory is one block's weights.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from torch import nn

__all__ = ["Prefetcher"]

_EXECUTOR: ThreadPoolExecutor | None = None
_LOCK = threading.Lock()


def _executor() -> ThreadPoolExecutor:
    global _EXECUTOR
    with _LOCK:
        if _EXECUTOR is None:
            _EXECUTOR = ThreadPoolExecutor(max_workers=1, thread_name_prefix="accel-prefetch")
        return _EXECUTOR


class Prefetcher:
    """Loads the weights of the hook that ran after the current one last time, ahead."""

    def __init__(self) -> None:
        self.order: list[int] = []
        self.position: dict[int, int] = {}
        self.entries: dict[int, tuple[Any, nn.Module]] = {}
        self.pending: tuple[int, Future] | None = None
        self.hits = 0
        self.misses = 0

    def take(self, hook: Any, module: nn.Module) -> dict[str, Any] | None:
        """Weights prefetched for ``hook`` (None: load them now); schedules the next block."""
        key = id(hook)
        if key not in self.entries:
            self.entries[key] = (hook, module)
            self.position[key] = len(self.order)
            self.order.append(key)
        result = None
        if self.pending is not None:
            pending_key, future = self.pending
            self.pending = None
            if pending_key == key:
                result = future.result()
            else:
                future.cancel()
        if result is None:
            self.misses += 1
        else:
            self.hits += 1
        position = self.position[key] + 1
        if position < len(self.order):
            next_hook, next_module = self.entries[self.order[position]]
            self.pending = (self.order[position],
                            _executor().submit(next_hook.load_weights, next_module))
        return result

    def reset(self) -> None:
        """Forget the learned order and drop a pending read (e.g. after hooks changed)."""
        if self.pending is not None:
            self.pending[1].cancel()
        self.pending = None
        self.order.clear()
        self.position.clear()
        self.entries.clear()
