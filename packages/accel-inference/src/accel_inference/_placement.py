"""The greedy planner behind ``infer_auto_device_map``: Accelerate's placement rules.

Blocks are taken in module order from a queue and put on the current device while they fit;
the devices are used in order (GPUs, mps, CPU, then the disk, which never fills). Rules, in
the order a block meets them:

1. The execution devices (the first GPU and the CPU, or ``mps`` alone) keep room for the
   largest whole layer still to place: an offloaded layer is brought there to run. That
   largest layer is recomputed as layers are taken, so a model whose end fits is not
   pushed to the next device by room kept for a layer already placed.
2. A block goes with the blocks that hold its tied partners (counted once per tied tensor,
   as Accelerate counts them). If the block fits alone but not with its partners, the first
   partner block that can be split is split and the block is tried again.
3. A block that does not fit is split into its direct tensors and children, unless it is a
   leaf, a tensor, or of a class in ``no_split_module_classes``; otherwise the planner moves
   to the next device (an execution device then counts the room it kept as used).
4. ``fallback_allocation``: before leaving a device that got nothing, the first block (or
   part of one, searched in order) that fits next to the kept room is placed there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from accel_inference.sizing import get_max_layer_size, top_level_items
from accel_inference.tensors import holds
from accel_inference.tied import get_module_size_with_ties, tied_partners

Item = tuple[str, Any]


def split_items(name: str, item: Any, no_split: set[str]) -> list[Item] | None:
    """The parts of a queued block (direct tensors, children, direct buffers), or None when
    it must stay whole (a tensor, a leaf module, or a class in ``no_split``)."""
    if not isinstance(item, nn.Module) or type(item).__name__ in no_split or \
            next(item.children(), None) is None:
        return None
    return top_level_items(item, name)


def _detach(queue: Sequence[Item], target: str) -> list[Item]:
    """``queue`` without ``target``: a queued ancestor of it is first replaced by its parts."""
    out = list(queue)
    while True:
        at = next((i for i, (n, _) in enumerate(out) if n != target and holds(n, target)), None)
        if at is None:
            return [item for item in out if item[0] != target]
        name, module = out[at]
        out[at:at + 1] = top_level_items(module, name)


@dataclass(kw_only=True)
class Planner:
    """One run of the placement; ``run()`` returns the raw (uncleaned) device map."""

    memory: Mapping[int | str, int]
    """Usable bytes per device (the disk is unbounded and needs no entry)."""
    devices: list[int | str]
    """Devices in the order they are filled, ending with ``"disk"``."""
    main_devices: set[int | str]
    """Devices that keep room for the largest layer (offloaded layers run there)."""
    sizes: Mapping[str, int]
    """Bytes per module / tensor name (``compute_module_sizes``)."""
    buffer_sizes: Mapping[str, int]
    """Bytes of buffers per module name."""
    tied_groups: list[list[str]]
    """Groups of names of one shared parameter (``find_tied_parameters``)."""
    no_split: set[str]
    """Class names never split across devices."""
    queue: list[Item]
    """Blocks still to place, in order."""
    offload_buffers: bool = False
    """Whether offloaded blocks' buffers are offloaded too (else they are counted to warn)."""
    fallback_allocation: bool = False
    """Whether a device that would get nothing gets the first block that fits there."""
    verbose: bool = False
    """Print each decision."""
    device_map: dict[str, int | str] = field(default_factory=dict)
    used: dict[int | str, int] = field(default_factory=dict)
    buffers: dict[int | str, int] = field(default_factory=dict)
    """Bytes of buffers of the blocks placed per device (when not ``offload_buffers``)."""
    needed: dict[int | str, int] = field(default_factory=dict)
    """Devices left empty: the bytes the block refused there would have needed."""
    index: int = 0
    max_layer: int = 0
    max_layer_names: list[str] = field(default_factory=list)

    def run(self) -> dict[str, int | str]:
        self.used = dict.fromkeys(self.devices, 0)
        self.max_layer, self.max_layer_names = get_max_layer_size(self.queue, self.sizes,
                                                                  sorted(self.no_split))
        while self.queue:
            self._step(*self.queue.pop(0))
        return self.device_map

    def _say(self, message: str) -> None:
        if self.verbose:
            print(message)

    def _refresh_max_layer(self) -> None:
        modules = [(n, m) for n, m in self.queue if isinstance(m, nn.Module)]
        self.max_layer, self.max_layer_names = get_max_layer_size(modules, self.sizes,
                                                                  sorted(self.no_split))

    def _step(self, name: str, item: Any) -> None:
        # the layer being placed needs no room kept for it: once all largest layers are
        # taken, the largest of those still queued sets the room to keep
        self.max_layer_names = [n for n in self.max_layer_names if not holds(name, n)]
        if not self.max_layer_names:
            self._refresh_max_layer()
        device = self.devices[self.index]
        reserve = self.max_layer if device in self.main_devices else 0
        room = None if device == "disk" else self.memory[device] - reserve
        size = self.sizes.get(name, 0)
        partners = tied_partners(name, self.tied_groups)
        total, holders, blocks = get_module_size_with_ties(partners, size, self.sizes,
                                                           self.queue)
        used = self.used[device]
        if room is None or used + total <= room:
            self._place(name, item, holders, device, total, room)
            return
        self._say(f"{name} ({total} bytes with its tied blocks {holders}) does not fit the "
                  f"{room - used} bytes left on {device}.")
        if partners and used + size <= room and self._split_partner(name, item, holders, blocks):
            return
        if used + size >= room:
            parts = split_items(name, item, self.no_split)
            if parts:
                self._say(f"Splitting {name}.")
                self.queue[:0] = parts
                self._refresh_max_layer()
                return
        if self.fallback_allocation and used == 0 and device != "disk" and \
                self._fallback(name, item, device, total):
            return
        if used == 0:
            self.needed[device] = total + reserve
        self._say(f"Moving on from {device}.")
        self.used[device] = used + reserve
        self.index += 1
        self.queue.insert(0, (name, item))

    def _place(self, name: str, item: Any, holders: list[str], device: int | str, total: int,
               room: int | None) -> None:
        left = "" if room is None else f", {room - self.used[device]} bytes left"
        self._say(f"Putting {name}{f' with {holders}' if holders else ''} ({total} bytes"
                  f"{left}) on {device}.")
        self.used[device] += total
        self.device_map[name] = device
        for holder in holders:
            at = next((i for i, (n, _) in enumerate(self.queue) if n == holder), None)
            if at is not None:
                self.queue.pop(at)
            self.device_map[holder] = device
        if not self.offload_buffers and isinstance(item, nn.Module):
            self.buffers[device] = self.buffers.get(device, 0) + self.buffer_sizes.get(name, 0)

    def _split_partner(self, name: str, item: Any, holders: list[str],
                       blocks: list[Any]) -> bool:
        """Split the first splittable block holding a tied partner; False when none is."""
        for holder, block in zip(holders, blocks, strict=True):
            parts = split_items(holder, block, self.no_split)
            if not parts:
                continue
            self._say(f"Splitting the tied block {holder}.")
            at = next(i for i, (n, _) in enumerate(self.queue) if n == holder)
            self.queue[at:at + 1] = parts
            self.queue.insert(0, (name, item))
            self._refresh_max_layer()
            return True
        self._say("No tied block can be split.")
        return False

    def _fallback(self, name: str, item: Any, device: int | str, total: int) -> bool:
        """Queue first the first block (searched depth-first) that fits an empty device."""
        limit = self.memory[device] - max(self.max_layer, total)
        todo = list(self.queue)
        while todo:
            candidate, block = todo.pop(0)
            rest = _detach(self.queue, candidate)
            # sized against the queue it will be placed from, so the next step places it
            need, _, _ = get_module_size_with_ties(
                tied_partners(candidate, self.tied_groups), self.sizes.get(candidate, 0),
                self.sizes, [(name, item), *rest])
            if need <= limit:
                self._say(f"Fallback: {candidate} ({need} bytes) goes to {device}.")
                self.queue = [(candidate, block), (name, item), *rest]
                return True
            parts = split_items(candidate, block, self.no_split)
            if parts:
                todo[:0] = parts
        return False
