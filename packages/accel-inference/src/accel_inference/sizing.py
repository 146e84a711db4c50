"""How big a model and its blocks are, and how much memory each device offers.

Sizes are computed from shapes and dtypes only, so they work on a model built with
``init_empty_weights`` (nothing allocated). ``max_memory`` dictionaries use Accelerate's
keys: GPU indices as ints, then ``"mps"``, ``"cpu"`` and ``"disk"``; values are bytes or
strings such as ``"10GiB"`` / ``"500MB"``.
"""

from __future__ import annotations

import logging
import os
import re
from collections import defaultdict
from collections.abc import Mapping, MutableMapping, Sequence
from typing import Any

import torch
from accel_checkpoint.weights import convert_file_size_to_int, dtype_byte_size
from accel_state.enums import CustomDtype
from accel_state.errors import ConfigurationError
from torch import nn

__all__ = ["compute_module_sizes", "compute_module_total_buffer_size", "calculate_maximum_sizes",
           "get_max_layer_size", "get_max_memory", "get_balanced_memory", "parse_memory",
           "normalize_device", "convert_dtype", "get_module_leaves"]

logger = logging.getLogger("accel.big_modeling")

_CUDA = re.compile(r"^(?:cuda|xpu|npu|mlu|musa|hpu):(\d+)$")


def convert_dtype(dtype: Any) -> torch.dtype | None:
    """``"float16"``, ``"torch.float16"`` or a ``torch.dtype``; an unknown name is an error."""
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    value = getattr(torch, str(dtype).removeprefix("torch."), None)
    if not isinstance(value, torch.dtype):
        raise ConfigurationError(f"Unknown dtype {dtype!r}: use a torch dtype or its name "
                                 "('float16', 'bfloat16', 'float32', ...).")
    return value


def _size_dtype(dtype: Any) -> torch.dtype | CustomDtype | None:
    """A dtype to size weights in: a torch dtype (or its name), or a quantised format."""
    return dtype if isinstance(dtype, CustomDtype) else convert_dtype(dtype)


def _tensor_size(tensor: torch.Tensor, dtype: torch.dtype | CustomDtype | None) -> int:
    if dtype is None:
        return tensor.numel() * tensor.element_size()
    return int(tensor.numel() * min(dtype_byte_size(dtype), dtype_byte_size(tensor.dtype)))


def compute_module_sizes(model: nn.Module, dtype: Any = None,
                         special_dtypes: Mapping[str, Any] | None = None,
                         buffers_only: bool = False) -> dict[str, int]:
    """Bytes per module name (and per tensor name), parents included; ``""`` is the total.

    ``dtype`` is the dtype the weights will be loaded in (never up-casts a smaller tensor;
    ``CustomDtype.INT4`` for 4-bit weights); ``special_dtypes`` overrides it for named tensors
    (e.g. modules kept in float32).
    """
    dtype = _size_dtype(dtype)
    special = {k: _size_dtype(v) for k, v in (special_dtypes or {}).items()}
    sizes: dict[str, int] = defaultdict(int)
    tensors = model.named_buffers() if buffers_only else \
        [*model.named_parameters(), *model.named_buffers()]
    for name, tensor in tensors:
        size = (_tensor_size(tensor, special[name]) if name in special
                else _tensor_size(tensor, dtype if tensor.is_floating_point() else None))
        parts = name.split(".")
        for i in range(len(parts) + 1):
            sizes[".".join(parts[:i])] += size
    sizes.setdefault("", 0)
    return dict(sizes)


def compute_module_total_buffer_size(model: nn.Module, dtype: Any = None,
                                     special_dtypes: Mapping[str, Any] | None = None) -> int:
    """Bytes of all buffers of ``model``."""
    return compute_module_sizes(model, dtype, special_dtypes, buffers_only=True).get("", 0)


def get_max_layer_size(modules: Sequence[tuple[str, Any]], module_sizes: Mapping[str, int],
                       no_split_module_classes: Sequence[str]) -> tuple[int, list[str]]:
    """Size and names of the largest unit that must sit whole on one device.

    Units are leaf modules, tensors, and modules whose class is in
    ``no_split_module_classes`` (a transformer block is never split across devices).
    """
    no_split = set(no_split_module_classes or ())
    largest, names = 0, []
    todo = list(modules)
    while todo:
        name, module = todo.pop(0)
        children = list(module.named_children()) if isinstance(module, nn.Module) else []
        if not children or type(module).__name__ in no_split:
            size = module_sizes.get(name, 0)
            if size > largest:
                largest, names = size, [name]
            elif size == largest and size > 0:
                names.append(name)
        else:
            todo = [(f"{name}.{n}" if name else n, m) for n, m in children] + todo
    return largest, names


def top_level_items(model: nn.Module, prefix: str = "") -> list[tuple[str, Any]]:
    """Direct parameters, children and direct buffers of ``model``, with full names."""
    join = (lambda n: f"{prefix}.{n}") if prefix else (lambda n: n)
    return ([(join(n), p) for n, p in model.named_parameters(recurse=False)] +
            [(join(n), m) for n, m in model.named_children()] +
            [(join(n), b) for n, b in model.named_buffers(recurse=False)])


def calculate_maximum_sizes(model: nn.Module) -> tuple[int, tuple[int, list[str]]]:
    """(total bytes, (largest layer bytes, its names)) honouring ``model._no_split_modules``."""
    sizes = compute_module_sizes(model)
    no_split = getattr(model, "_no_split_modules", None) or []
    return sizes[""], get_max_layer_size(top_level_items(model), sizes, no_split)


def parse_memory(value: Any, device: Any = None) -> int:
    """Bytes from an int or a string such as ``"10GiB"``, ``"500MB"``, ``"1.5 GB"``."""
    if isinstance(value, bool):
        raise ConfigurationError(f"Memory for device {device!r} is {value!r}: give bytes "
                                 "(an int) or a string such as '10GiB' or '500MB'.")
    if isinstance(value, (int, float)):
        return int(value)
    try:
        return convert_file_size_to_int(str(value).replace(" ", ""))
    except Exception:
        where = f" for device {device!r}" if device is not None else ""
        raise ConfigurationError(f"Cannot read the memory size {value!r}{where}: use an int "
                                 "of bytes or a string such as '10GiB', '500MB' or '2GB'.") \
            from None


def normalize_device(device: Any) -> int | str:
    """A device-map / max_memory key in Accelerate's spelling: int, "mps", "cpu" or "disk"."""
    if isinstance(device, torch.device):
        if device.type in ("cpu", "mps", "meta"):
            return device.type
        return device.index if device.index is not None else 0
    if isinstance(device, int) and not isinstance(device, bool) and device >= 0:
        return device
    if isinstance(device, str):
        if device in ("cpu", "disk", "mps", "meta"):
            return device
        if device.isdigit():
            return int(device)
        if device in ("cuda", "xpu", "npu", "mlu", "musa", "hpu"):
            return 0
        match = _CUDA.match(device)
        if match:
            return int(match.group(1))
    raise ConfigurationError(f"Unknown device {device!r}: use a GPU index (0, 1, ...), "
                             "'cuda:N', 'mps', 'cpu' or 'disk'.")


def _available_cpu_memory() -> int:
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")


def get_max_memory(max_memory: Mapping[Any, Any] | None = None) -> dict[int | str, int]:
    """Bytes usable per device: the free memory of each GPU and of the CPU, or ``max_memory``
    with its strings parsed and its keys ordered GPUs first, then mps, cpu, disk.

    As Accelerate does, the caller's dict gets its string sizes replaced by ints in place:
    transformers compares its own ``max_memory`` with the result afterwards."""
    if max_memory is None:
        found: dict[int | str, int] = {}
        if torch.cuda.is_available():
            for index in range(torch.cuda.device_count()):
                found[index] = torch.cuda.mem_get_info(index)[0]
        elif getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            found["mps"] = _available_cpu_memory()
        found["cpu"] = _available_cpu_memory()
        return found
    parsed: dict[int | str, int] = {}
    for key, value in max_memory.items():
        device = normalize_device(key)
        if device == "meta":
            raise ConfigurationError(f"max_memory key {key!r}: the meta device holds no weights.")
        parsed[device] = parse_memory(value, key)
        if isinstance(value, str) and isinstance(max_memory, MutableMapping):
            max_memory[key] = parsed[device]
    gpus = sorted(k for k in parsed if isinstance(k, int))
    count = torch.cuda.device_count()
    for index in gpus:
        if index >= count:
            logger.warning(f"Device {index} is not available, available devices are "
                           f"{list(range(count))}")
    order = [*gpus, *(k for k in ("mps", "cpu", "disk") if k in parsed)]
    return {k: parsed[k] for k in order}


def get_balanced_memory(model: nn.Module, max_memory: Mapping[Any, Any] | None = None,
                        no_split_module_classes: Sequence[str] | None = None, dtype: Any = None,
                        special_dtypes: Mapping[str, Any] | None = None,
                        low_zero: bool = False) -> dict[int | str, int]:
    """A ``max_memory`` that spreads the model evenly over the GPUs instead of filling GPU 0.

    Each GPU but the last is capped at its share of the model plus a margin (the largest
    no-split block or 1.25x the mean leaf module) so a block never spills over. With
    ``low_zero`` GPU 0 gets as little as possible (it keeps room for ``generate``).
    """
    user_set = max_memory is not None
    memory = get_max_memory(max_memory)
    gpus = sorted(k for k, v in memory.items() if isinstance(k, int) and v > 0)
    if not gpus:
        return memory
    if len(gpus) == 1:
        if not user_set:
            memory[gpus[0]] = int(memory[gpus[0]] * 0.9)
        return memory
    sizes = compute_module_sizes(model, dtype=dtype, special_dtypes=special_dtypes)
    share = sizes[""] // (len(gpus) - 1 if low_zero else len(gpus))
    no_split = set(no_split_module_classes or ())
    block = max((sizes.get(n, 0) for n, m in model.named_modules()
                 if n and type(m).__name__ in no_split), default=0)
    leaves = [n for n, m in model.named_modules() if n and not list(m.children())]
    mean_leaf = sum(sizes.get(n, 0) for n in leaves) // max(len(leaves), 1)
    share += int(1.25 * max(block, mean_leaf))
    for index in gpus[:-1]:
        memory[index] = min(share, memory[index])
    if low_zero:
        rest = sum(memory[i] for i in gpus[1:])
        memory[gpus[0]] = min(max(0, sizes[""] - rest), memory[gpus[0]])
    return memory


def get_module_leaves(module_sizes: dict[str, int]) -> list[str]:
    """The names in ``module_sizes`` (as :func:`compute_module_sizes` returns them) with no
    child listed under them, in their order; the root ``""`` is never a leaf."""
    parents = {name.rsplit(".", 1)[0] for name in module_sizes if "." in name}
    return [name for name in module_sizes if name and name not in parents]
