"""``Accelerator.profile()`` and its handler ``ProfileKwargs``: torch.profiler around a block,
with one Chrome trace per process.

The handler is a plain description (validated when built, torch.profiler is imported only
by :meth:`ProfileKwargs.build`); the mixin runs the profiler and writes
``<output_trace_dir>/profile_<rank>.json`` on every process, so a multi-process run leaves
one trace per rank to open in ``chrome://tracing`` or Perfetto.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from accel_checkpoint.constants import PROFILE_PATTERN_NAME
from accel_state import ConfigurationError, KwargsHandler

if TYPE_CHECKING:
    import torch.profiler

__all__ = ["ProfileKwargs", "ProfilingMixin"]

#: activity name (Accelerate's spelling) -> ``torch.profiler.ProfilerActivity`` member
_ACTIVITIES = {"cpu": "CPU", "cuda": "CUDA", "xpu": "XPU", "mtia": "MTIA", "hpu": "HPU"}
#: ``torch.profiler.schedule``'s keyword arguments; the first three have no default
_SCHEDULE_REQUIRED = ("wait", "warmup", "active")
_SCHEDULE_OPTIONAL = ("repeat", "skip_first", "skip_first_wait")


@dataclass(kw_only=True)
class ProfileKwargs(KwargsHandler):
    """Options of ``torch.profiler.profile`` for :meth:`Accelerator.profile` (pass it in
    ``kwargs_handlers`` or to ``profile()``), plus where to write the Chrome traces."""

    activities: list[str] | None = None
    """What to profile: ``"cpu"``, ``"cuda"``, ``"xpu"``, ``"mtia"``, ``"hpu"``; None: every
    activity the installed torch supports."""
    schedule_option: dict[str, int] | None = None
    """Arguments of ``torch.profiler.schedule`` (``wait``, ``warmup``, ``active``, and
    optionally ``repeat``, ``skip_first``, ``skip_first_wait``); call ``prof.step()`` once per
    step. None: record the whole block."""
    on_trace_ready: Callable[..., Any] | None = None
    """Called with the profiler each time a scheduled trace is ready."""
    record_shapes: bool = False
    """Record the input shapes of each operator."""
    profile_memory: bool = False
    """Track tensor memory allocation and release."""
    with_stack: bool = False
    """Record the Python source location of each operator."""
    with_flops: bool = False
    """Estimate FLOPs of matrix multiplications and convolutions."""
    with_modules: bool = False
    """Record the module hierarchy (``nn.Module`` names) of each operator."""
    output_trace_dir: str | os.PathLike[str] | None = None
    """Directory where each process writes ``profile_<process_index>.json`` when the block
    ends; None: write nothing (read the profiler yielded by ``profile()`` instead)."""

    def __post_init__(self) -> None:
        if self.activities is not None:
            if isinstance(self.activities, str):
                self.activities = [self.activities]
            unknown = [a for a in self.activities if a not in _ACTIVITIES]
            if unknown:
                raise ConfigurationError(
                    f"ProfileKwargs(activities={self.activities!r}): unknown activity "
                    f"{unknown[0]!r}; valid activities are {', '.join(map(repr, _ACTIVITIES))}.")
        if self.schedule_option is not None:
            _check_schedule(self.schedule_option)
        if self.on_trace_ready is not None and not callable(self.on_trace_ready):
            raise ConfigurationError(
                f"ProfileKwargs(on_trace_ready={self.on_trace_ready!r}) must be a callable "
                "taking the profiler, e.g. torch.profiler.tensorboard_trace_handler(dir).")

    def _activity(self, name: str) -> Any:
        from torch.profiler import ProfilerActivity

        member = getattr(ProfilerActivity, _ACTIVITIES[name], None)
        if member is None:
            raise ConfigurationError(
                f"ProfileKwargs(activities=[{name!r}]): this torch has no "
                f"ProfilerActivity.{_ACTIVITIES[name]}; drop {name!r} or upgrade torch.")
        return member

    def build(self) -> torch.profiler.profile:
        """The ``torch.profiler.profile`` these options describe (not started yet)."""
        import torch.profiler

        activities = (None if self.activities is None
                      else [self._activity(name) for name in self.activities])
        schedule = (None if self.schedule_option is None
                    else torch.profiler.schedule(**self.schedule_option))
        return torch.profiler.profile(
            activities=activities, schedule=schedule, on_trace_ready=self.on_trace_ready,
            record_shapes=self.record_shapes, profile_memory=self.profile_memory,
            with_stack=self.with_stack, with_flops=self.with_flops,
            with_modules=self.with_modules)


def _check_schedule(option: Any) -> None:
    if not isinstance(option, dict):
        raise ConfigurationError(
            f"ProfileKwargs(schedule_option={option!r}) must be a dict of "
            "torch.profiler.schedule arguments, e.g. {'wait': 1, 'warmup': 1, 'active': 2}.")
    known = (*_SCHEDULE_REQUIRED, *_SCHEDULE_OPTIONAL)
    for key, value in option.items():
        if key not in known:
            raise ConfigurationError(
                f"ProfileKwargs(schedule_option=...) has an unknown key {key!r}; "
                f"torch.profiler.schedule takes {', '.join(known)}.")
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigurationError(
                f"ProfileKwargs(schedule_option={{{key!r}: {value!r}}}) must be an integer >= 0.")
    missing = [key for key in _SCHEDULE_REQUIRED if key not in option]
    if missing:
        raise ConfigurationError(
            f"ProfileKwargs(schedule_option={option!r}) lacks {', '.join(missing)}: "
            "torch.profiler.schedule needs wait, warmup and active.")


class ProfilingMixin:
    """``Accelerator.profile`` (expects ``profile_handler``, ``process_index``,
    ``wait_for_everyone``)."""

    profile_handler: ProfileKwargs | None
    process_index: int

    @contextlib.contextmanager
    def profile(self, profile_handler: ProfileKwargs | None = None
                ) -> Iterator[torch.profiler.profile]:
        """Profile the block with ``torch.profiler`` and yield the profiler (call its
        ``step()`` once per step when a schedule is set).

        Options come from ``profile_handler``, else the ``ProfileKwargs`` given to the
        Accelerator, else the defaults. With ``output_trace_dir``, every process writes its
        Chrome trace ``profile_<process_index>.json`` there when the block ends, then the
        processes wait for each other (call it on every process).
        """
        handler = profile_handler or self.profile_handler or ProfileKwargs()
        if not isinstance(handler, ProfileKwargs):
            raise ConfigurationError(
                f"Accelerator.profile(profile_handler={handler!r}) must be a ProfileKwargs.")
        with handler.build() as profiler:
            yield profiler
        if handler.output_trace_dir is None:
            return
        directory = Path(handler.output_trace_dir)
        directory.mkdir(parents=True, exist_ok=True)
        if profiler.profiler is None:  # a schedule that never reached its active steps
            warnings.warn(
                f"Accelerator.profile(): no trace to write to {directory}: the schedule "
                f"{handler.schedule_option} never recorded a step (call prof.step() once per "
                "step, and run at least wait + warmup + active steps).", stacklevel=3)
        else:
            name = PROFILE_PATTERN_NAME.format(suffix=self.process_index)
            profiler.export_chrome_trace(str(directory / name))
        self.wait_for_everyone()  # type: ignore[attr-defined]
