"""Place one tensor of a module: materialise it from ``meta``, move it, cast it.

The primitive under loading, dispatch and offload hooks. It swaps entries of
``module._parameters`` / ``module._buffers`` (never ``param.data = ...``), so a parameter
on ``meta`` can be replaced by a real one without allocating twice.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from accel_state.errors import ConfigurationError
from accel_state.memory import clear_device_cache
from torch import nn

__all__ = ["set_module_tensor_to_device", "named_module_tensors", "get_non_persistent_buffers",
           "align_module_device", "has_offloaded_params", "clear_device_cache",
           "get_module_and_name"]

_EXACT = ("torch.uint", "torch.int", "torch.bool")


def holds(block: str, name: str) -> bool:
    """Whether the module path ``block`` is ``name`` or contains it (``""``, the root,
    contains every name): whole name parts, so ``"layer1"`` does not hold ``"layer10.w"``."""
    return block == "" or name == block or name.startswith(block + ".")


def get_module_and_name(module: nn.Module, tensor_name: str) -> tuple[nn.Module, str]:
    """The submodule owning ``tensor_name`` ("a.b.weight") and the tensor's local name."""
    *path, name = tensor_name.split(".")
    for part in path:
        child = getattr(module, part, None)
        if not isinstance(child, nn.Module):
            raise ConfigurationError(f"{type(module).__name__} has no submodule {part!r} "
                                     f"(looking for the tensor {tensor_name!r}).")
        module = child
    return module, name


def set_module_tensor_to_device(module: nn.Module, tensor_name: str, device: Any,
                                value: Any = None, dtype: Any = None,
                                fp16_statistics: torch.Tensor | None = None,
                                tied_params_map: dict[int, dict[Any, torch.Tensor]] | None = None,
                                non_blocking: bool = False, clear_cache: bool = True) -> None:
    """Put the parameter or buffer ``tensor_name`` of ``module`` on ``device``.

    With ``value``, that tensor replaces the old one (cast to ``dtype``, or to the old dtype
    for floating values); without, the current tensor moves (impossible from ``meta``).
    ``tied_params_map`` (data pointer -> device -> tensor) reuses a tied weight already put on
    ``device`` instead of copying it again.
    """
    owner, name = get_module_and_name(module, tensor_name)
    if name not in owner._parameters and name not in owner._buffers:
        raise ConfigurationError(f"{type(owner).__name__} does not have a parameter or a buffer "
                                 f"named {name} (full name {tensor_name!r}): check the name "
                                 "against model.state_dict().")
    is_buffer = name in owner._buffers
    old = owner._buffers[name] if is_buffer else owner._parameters[name]
    _check_shape(old, value, name, tensor_name)
    source = value if value is not None else old
    if (tied_params_map is not None and isinstance(source, torch.Tensor)
            and source.device.type != "meta" and source.data_ptr() in tied_params_map
            and device in tied_params_map[source.data_ptr()]):
        tied = tied_params_map[source.data_ptr()][device]
        (owner._buffers if is_buffer else owner._parameters)[name] = tied
        return
    if old is None:
        raise ConfigurationError(f"{tensor_name!r} is None in the model: nothing to place.")
    target = torch.device(device) if not isinstance(device, torch.device) else device
    if value is None and old.device.type == "meta" and target.type != "meta":
        raise ConfigurationError(f"{name} is on the meta device, we need a `value` to put in on "
                                 f"{device}: pass value= (the weights of {tensor_name!r}).")
    with torch.no_grad():
        if value is None and target.type == "meta":  # native, unlike .to("meta")
            new = torch.empty_like(old, device=target, dtype=dtype or old.dtype)
        elif value is None:
            new = old.to(target, non_blocking=non_blocking) if dtype is None else \
                old.to(target, dtype=dtype, non_blocking=non_blocking)
        else:
            if not isinstance(value, torch.Tensor):
                value = torch.tensor(value)
            if not str(value.dtype).startswith(_EXACT):
                cast = dtype if dtype is not None else old.dtype
                if not str(cast).startswith(_EXACT):
                    value = value.to(dtype=cast)
            new = value.to(target, non_blocking=non_blocking)
    if is_buffer:
        owner._buffers[name] = new
    else:
        param_cls = type(old)
        fields = {k: v for k, v in vars(old).items() if k != "requires_grad"}
        grad = old.requires_grad and (new.is_floating_point() or new.is_complex())
        if param_cls is nn.Parameter:
            new = nn.Parameter(new, requires_grad=grad)
        else:
            new = param_cls(new, requires_grad=grad, **fields)
        owner._parameters[name] = new
    if fp16_statistics is not None and hasattr(new, "SCB"):
        new.SCB = fp16_statistics.to(target)
    if tied_params_map is not None and isinstance(source, torch.Tensor) and \
            source.device.type != "meta" and source.data_ptr() in tied_params_map:
        tied_params_map[source.data_ptr()][device] = new
    if clear_cache and old.device.type == "cuda" and target.type != "cuda":
        clear_device_cache()


def _check_shape(old: torch.Tensor | None, value: Any, name: str, tensor_name: str) -> None:
    """A value of another shape than the tensor it replaces means the checkpoint is not this
    model's: refuse it before anything changes. The message is Accelerate's, word for word
    (its tests compare it); the fix goes in a note, which tracebacks show."""
    shape = getattr(value, "shape", None)  # tensors and arrays, as Accelerate checks
    if (old is None or shape is None or tuple(shape) == tuple(old.shape)
            or type(old).__name__ == "Params4bit"):  # 4-bit weights are stored packed
        return
    error = ConfigurationError(f'Trying to set a tensor of shape {shape} in "{name}" (which '
                               f"has shape {old.shape}), this looks incorrect.")
    note = (f"{tensor_name!r} in the checkpoint belongs to another layer or model: check that "
            "the checkpoint matches the model (its config and size).")
    if hasattr(error, "add_note"):  # Python 3.11+; on 3.10 the message alone
        error.add_note(note)
    raise error


def get_non_persistent_buffers(module: nn.Module, recurse: bool = False,
                               fqns: bool = False) -> set[str]:
    """Names of buffers registered with ``persistent=False`` (not in the state dict), in a new
    set (the module's own is never touched). As in Accelerate, ``recurse`` gives bare names
    and ``fqns=True`` dotted ones (``"sub.buf"``; the root's also as ``".buf"``)."""
    found = set(module._non_persistent_buffers_set)
    if recurse:
        for prefix, sub in module.named_modules():
            names = sub._non_persistent_buffers_set
            found |= {f"{prefix}.{n}" for n in names} if fqns else names
    return found


def named_module_tensors(module: nn.Module, include_buffers: bool = True, recurse: bool = False,
                         remove_non_persistent: bool = False) -> Iterator[tuple[str, torch.Tensor]]:
    """Parameters then (optionally) buffers of ``module``, with their dotted names."""
    yield from module.named_parameters(recurse=recurse)
    if include_buffers:
        # dotted names, the ones named_buffers gives (Accelerate's bare ones miss nested buffers)
        skip = get_non_persistent_buffers(module, recurse=recurse, fqns=True) \
            if remove_non_persistent else set()
        for name, buffer in module.named_buffers(recurse=recurse):
            if name not in skip:
                yield name, buffer


def has_offloaded_params(module: nn.Module) -> bool:
    """Whether ``module`` carries an offloading ``AlignDevicesHook`` (weights live elsewhere)."""
    hook = getattr(module, "_hf_hook", None)
    return hook is not None and bool(getattr(hook, "offload", False))


@contextlib.contextmanager
def align_module_device(module: nn.Module, execution_device: Any = None) -> Iterator[None]:
    """Inside the block, ``module``'s own tensors are real and on ``execution_device``.

    For an offloaded module the hook's weights are brought in and dropped again after;
    otherwise tensors move to ``execution_device`` (when given) and back.
    """
    if has_offloaded_params(module):
        hook = module._hf_hook
        if execution_device is not None:
            original, hook.execution_device = hook.execution_device, execution_device
        try:
            hook.pre_forward(module)
            yield
        finally:
            hook.post_forward(module, None)
            if execution_device is not None:
                hook.execution_device = original
        return
    if execution_device is None:
        yield
        return
    devices = {name: t.device for name, t in named_module_tensors(module)}
    try:
        for name in devices:
            set_module_tensor_to_device(module, name, execution_device)
        yield
    finally:
        for name, device in devices.items():
            set_module_tensor_to_device(module, name, device)
