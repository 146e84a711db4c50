"""Process-wide state: :class:`PartialState` (who am I, which device); :class:`GradientState`
(its home is :mod:`accel_state.gradient_state`) is re-exported here, Accelerate's path.

Both are "borg" singletons as in Accelerate: every instance shares one ``__dict__`` so
``PartialState()`` anywhere in a program sees the same process group and device. Tests
reset them with ``_reset_state()``.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import gc
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any, TypeVar

import torch
import torch.distributed as dist

from accel_state import detect, env
from accel_state.enums import DistributedType
from accel_state.errors import ConfigurationError, DistributedError
from accel_state.gradient_state import GradientState
from accel_state.kwargs import InitProcessGroupKwargs
from accel_state.shared import SharedDict, ThreadLocalSharedDict

__all__ = ["PartialState", "GradientState", "SharedDict", "ThreadLocalSharedDict", "is_initialized"]

_F = TypeVar("_F", bound=Callable[..., Any])


class PartialState:
    """This process's place in the job: rank, world size, device, backend, process group.

    The first construction detects the launch environment (torchrun / ``accel launch``,
    SLURM, MPI), picks the device and, with more than one process, initialises the
    default process group. ``cpu=True`` (or ``ACCEL_USE_CPU=1``, set by
    ``accel launch --cpu``) forces the CPU and the gloo backend. Extra keyword arguments
    go to ``torch.distributed.init_process_group`` (``backend``, ``timeout``, ``init_method``).
    """

    _shared_state: dict[str, Any] = SharedDict()

    def __init__(self, cpu: bool = False, **kwargs: Any) -> None:
        self.__dict__ = self._shared_state
        if self.initialized:
            return
        try:
            self._setup(cpu, InitProcessGroupKwargs(**kwargs))
        except BaseException:
            self._shared_state.clear()  # a failed set-up must not look initialised next time
            raise

    # -- construction helpers -----------------------------------------------------------------
    def _setup(self, cpu: bool, options: InitProcessGroupKwargs) -> None:
        placement = detect.detect_placement()
        device_type = detect.select_device_type(cpu)
        self._cpu = device_type == "cpu"
        self.debug = env.DEBUG_MODE.get_bool(False)
        self.fork_launched = False
        self.num_processes = placement.world_size
        self.process_index = placement.rank
        self.local_process_index = placement.local_rank
        self.launch_source = placement.source
        self.distributed_type = detect.distributed_type_for_device(device_type, self.num_processes)
        self.backend: str | None = None
        self.device = self._pick_device(device_type)
        if self.num_processes > 1:
            self.backend = options.backend or detect.backend_for_device(device_type)
            self._init_process_group(options)
        elif dist.is_available() and dist.is_initialized():
            # A process group made by the user (or a framework) before us: adopt it.
            self._adopt_process_group()

    def _pick_device(self, device_type: str) -> torch.device:
        forced = env.TORCH_DEVICE.get()
        if forced and torch.device(forced).type == device_type:
            return torch.device(forced)  # ACCELERATE_TORCH_DEVICE names the device, index too
        if device_type == "cpu":
            return torch.device("cpu")
        if device_type == "mps":
            return torch.device("mps")
        index = self.local_process_index
        module = getattr(torch, device_type, None)
        count = module.device_count() if module is not None and hasattr(module, "device_count") else 0
        if count and self.num_processes > 1 and index >= count:
            raise ConfigurationError(
                f"Local rank {index} has no {device_type} device: only {count} are visible. "
                "Launch at most one process per device (accel launch --num_processes) or pass --cpu."
            )
        return torch.device(device_type, index if count else 0)

    def _init_process_group(self, options: InitProcessGroupKwargs) -> None:
        if not dist.is_available():
            raise DistributedError(
                f"{self.num_processes} processes were launched but this torch build has no "
                "torch.distributed; install a torch build with distributed support."
            )
        if dist.is_initialized():
            self._adopt_process_group()
            return
        if options.init_method is None and not (env.MASTER_ADDR.is_set() and env.MASTER_PORT.is_set()):
            raise ConfigurationError(
                f"{self.num_processes} processes detected from {self.launch_source}, but MASTER_ADDR "
                "and MASTER_PORT are not set. Start the job with `accel launch` (or torchrun), or "
                "export MASTER_ADDR/MASTER_PORT of the rank-0 machine."
            )
        if self.device.type != "cpu" and hasattr(torch, self.device.type):
            getattr(torch, self.device.type).set_device(self.device)
        timeout = options.timeout
        if timeout is None:
            seconds = env.PROCESS_GROUP_TIMEOUT.get_int()
            timeout = timedelta(seconds=seconds) if seconds else None
        kwargs: dict[str, Any] = {"backend": self.backend, "rank": self.process_index,
                                  "world_size": self.num_processes,
                                  "init_method": options.init_method or "env://"}
        if timeout is not None:
            kwargs["timeout"] = timeout
        dist.init_process_group(**kwargs)
        self._owns_process_group = True
        atexit.register(_destroy_owned_group_at_exit)

    def _adopt_process_group(self) -> None:
        self.num_processes = dist.get_world_size()
        self.process_index = dist.get_rank()
        self.backend = dist.get_backend()
        self.distributed_type = detect.distributed_type_for_device(self.device.type,
                                                                   self.num_processes)
        self._owns_process_group = False

    # -- read-only views ----------------------------------------------------------------------
    _STATE_ATTRIBUTES = frozenset({"device", "distributed_type", "backend", "num_processes",
                                   "process_index", "local_process_index", "debug",
                                   "fork_launched", "launch_source", "_cpu"})

    def __getattr__(self, name: str) -> Any:
        """Only misses land here: a state attribute is missing after ``_reset_state()``."""
        raise _missing_attribute(type(self).__name__, name, name in self._STATE_ATTRIBUTES)

    @property
    def initialized(self) -> bool:
        return bool(self._shared_state)

    @property
    def use_distributed(self) -> bool:
        return self.distributed_type != DistributedType.NO and self.num_processes > 1

    @property
    def is_main_process(self) -> bool:
        return self.process_index == 0

    @property
    def is_local_main_process(self) -> bool:
        return self.local_process_index == 0

    @property
    def is_last_process(self) -> bool:
        return self.process_index == self.num_processes - 1

    @property
    def default_device(self) -> torch.device:
        return torch.device(detect.select_device_type(self._cpu))

    def __repr__(self) -> str:
        return (f"Distributed environment: {self.distributed_type}{f'  Backend: {self.backend}' if self.backend else ''}\n"
                f"Num processes: {self.num_processes}\nProcess index: {self.process_index}\n"
                f"Local process index: {self.local_process_index}\nDevice: {self.device}\n")

    # -- synchronisation ----------------------------------------------------------------------
    def wait_for_everyone(self) -> None:
        """Barrier across all processes; a no-op in a single process."""
        if self.use_distributed:
            dist.barrier()

    @contextlib.contextmanager
    def _goes_first(self, is_first: bool) -> Iterator[None]:
        if not is_first:
            self.wait_for_everyone()
        yield
        if is_first:
            self.wait_for_everyone()

    def main_process_first(self) -> contextlib.AbstractContextManager[None]:
        """The main process runs the block first (e.g. to download or preprocess), then the rest."""
        return self._goes_first(self.is_main_process)

    def local_main_process_first(self) -> contextlib.AbstractContextManager[None]:
        """Like :meth:`main_process_first`, once per machine."""
        return self._goes_first(self.is_local_main_process)

    # -- run on selected ranks ----------------------------------------------------------------
    def _only_if(self, predicate: Callable[[], bool], function: _F) -> _F:
        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if predicate():
                return function(*args, **kwargs)
            return None

        return wrapper  # type: ignore[return-value]

    def on_main_process(self, function: _F) -> _F:
        return self._only_if(lambda: self.is_main_process, function)

    def on_local_main_process(self, function: _F) -> _F:
        return self._only_if(lambda: self.is_local_main_process, function)

    def on_last_process(self, function: _F) -> _F:
        return self._only_if(lambda: self.is_last_process, function)

    def on_process(self, function: _F | None = None, process_index: int | None = None) -> Any:
        if function is None:
            return functools.partial(self.on_process, process_index=process_index)
        return self._only_if(lambda: self.process_index == process_index, function)

    def on_local_process(self, function: _F | None = None,
                         local_process_index: int | None = None) -> Any:
        if function is None:
            return functools.partial(self.on_local_process, local_process_index=local_process_index)
        return self._only_if(lambda: self.local_process_index == local_process_index, function)

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` once per machine (on the local main process)."""
        if self.is_local_main_process:
            print(*args, **kwargs)

    # -- data splitting -----------------------------------------------------------------------
    @contextlib.contextmanager
    def split_between_processes(self, inputs: Any, apply_padding: bool = False) -> Iterator[Any]:
        """Yield this process's contiguous share of a list, tuple, dict of sequences or tensor.

        The first ``len % num_processes`` processes get one extra item. With
        ``apply_padding`` every share is padded with its last item to the longest share,
        so gathered results have equal sizes (drop the padding afterwards).
        """
        if self.num_processes == 1:
            yield inputs
            return
        yield _split(inputs, self.num_processes, self.process_index, apply_padding)

    # -- device / teardown --------------------------------------------------------------------
    def set_device(self) -> None:
        """Make :attr:`device` the current device of its accelerator module (no-op on CPU)."""
        if self.device.type not in ("cpu", "mps") and hasattr(torch, self.device.type):
            getattr(torch, self.device.type).set_device(self.device)

    def destroy_process_group(self, group: Any = None) -> None:
        """Destroy ``group``, or the default group, as Accelerate does at the end of a run.

        Safe without a group (nothing happens); a fork-launched notebook run keeps its
        default group, which the notebook launcher owns. Works after ``_reset_state()``.
        """
        if group is None and self._shared_state.get("fork_launched", False):
            return
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group(group)

    @classmethod
    def _reset_state(cls) -> None:
        """Forget everything (tests). Does not destroy the process group."""
        cls._shared_state.clear()


def _split(inputs: Any, n: int, index: int, apply_padding: bool) -> Any:
    if isinstance(inputs, dict):
        lengths = {len(v) for v in inputs.values()}
        if len(lengths) > 1:
            raise ConfigurationError(
                "split_between_processes needs every value of the dict to have the same length; "
                f"got lengths { {k: len(v) for k, v in inputs.items()} }."
            )
        return {k: _split(v, n, index, apply_padding) for k, v in inputs.items()}
    if not hasattr(inputs, "__len__") or not hasattr(inputs, "__getitem__"):
        raise ConfigurationError(
            f"split_between_processes cannot split a {type(inputs).__name__}: pass a list, tuple, "
            "dict of sequences or tensor."
        )
    per, extra = divmod(len(inputs), n)
    start = index * per + min(index, extra)
    end = start + per + (1 if index < extra else 0)
    longest = per + (1 if extra else 0)
    if _is_hf_dataset(inputs):  # slicing one gives a dict of columns: select rows instead
        rows = list(range(start, end))
        if apply_padding and len(inputs) > 0:
            rows += [rows[-1] if rows else len(inputs) - 1] * (longest - len(rows))
        return inputs.select(rows)
    share = inputs[start:end]
    if apply_padding and len(share) < longest and len(inputs) > 0:
        filler = share[-1:] if len(share) else inputs[-1:]
        missing = longest - len(share)
        if isinstance(share, torch.Tensor):
            share = torch.cat([share, filler.repeat(missing, *([1] * (share.dim() - 1)))])
        else:
            share = share + type(share)(filler) * missing
    return share


def _is_hf_dataset(inputs: Any) -> bool:
    """A Hugging Face ``datasets.Dataset`` (told by its API: accel-state never imports it)."""
    return callable(getattr(inputs, "select", None)) and hasattr(inputs, "column_names")


def _missing_attribute(owner: str, name: str, was_reset: bool) -> AttributeError:
    """The usual AttributeError, or for a state attribute the hint that the state was reset."""
    if not was_reset:
        return AttributeError(f"{owner!r} object has no attribute {name!r}")
    return AttributeError(
        f"`{owner}` object has no attribute `{name}`. This happens if `{owner}._reset_state()` "
        f"was called and no `{owner}` (or `Accelerator`) was created afterwards; create one.")


def _destroy_owned_group_at_exit() -> None:
    """Tear down the group we created while the interpreter is still whole.

    A gloo group still alive during interpreter finalisation (its worker threads holding
    Python objects) aborts the process. Wrappers such as DDP keep the group alive through
    reference cycles, so collect them first, then destroy, then collect what was released.
    """
    if PartialState._shared_state.get("_owns_process_group") and dist.is_initialized():
        gc.collect()
        dist.destroy_process_group()
        gc.collect()


def is_initialized() -> bool:
    """Whether a :class:`PartialState` has been built in this process."""
    return bool(PartialState._shared_state)
