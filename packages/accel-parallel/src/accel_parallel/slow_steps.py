"""One-time compiles that announce themselves: DeepSpeed's C++ ops and torch.compile's first
forward can take minutes on a small machine, and a run that prints nothing for minutes
gets killed. :class:`Announcer` says on the main process what is happening, where it is
cached, and how long it has taken so far (a daemon thread prints the elapsed time while the
step runs; nothing runs once it is done, so the training step pays nothing).
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

__all__ = ["Announcer", "announce_first_forward", "extension_dir", "uncompiled_extensions"]


class Announcer:
    """Context manager: print ``message`` after ``delay`` seconds (0: at once) if the block
    is still running, then the elapsed time every ``every`` seconds, and the total at the
    end; silent when the block ends before ``delay``, and on processes that are not
    ``main``."""

    def __init__(self, message: str, *, what: str, delay: float = 0.0, every: float = 30.0,
                 main: bool = True, stream: IO[str] | None = None) -> None:
        self.message, self.what, self.delay, self.every = message, what, delay, every
        self.main = main
        self.stream = stream
        self._done = threading.Event()
        self._spoke = False
        self._thread: threading.Thread | None = None
        self._start = 0.0

    def _say(self, text: str) -> None:
        print(f"accel: {text}", file=self.stream or sys.stderr, flush=True)

    def _watch(self) -> None:
        if self._done.wait(self.delay):
            return
        self._spoke = True
        self._say(self.message)
        while not self._done.wait(self.every):
            self._say(f"{self.what}: still running, {time.monotonic() - self._start:.0f} s so far")

    def __enter__(self) -> Announcer:
        self._start = time.monotonic()
        if self.main:
            self._thread = threading.Thread(target=self._watch, name="accel-announcer",
                                            daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join()
        if self._spoke:
            outcome = "failed" if exc[0] is not None else "done"
            self._say(f"{self.what}: {outcome} after {time.monotonic() - self._start:.0f} s")


def extension_dir(name: str) -> Path:
    """Where torch caches the JIT-compiled C++ extension ``name`` (DeepSpeed's ops among
    them): under ``TORCH_EXTENSIONS_DIR``, else torch's default ``~/.cache/torch_extensions``
    (torch creates the folder, as its build would)."""
    from torch.utils import cpp_extension

    probe = getattr(cpp_extension, "_get_build_directory", None)
    if probe is not None:
        return Path(probe(name, verbose=False))
    return Path(cpp_extension.get_default_build_root()) / name


def uncompiled_extensions(names: list[str]) -> list[str]:
    """Those of ``names`` that have no built library in the extensions cache yet."""
    return [n for n in names if not any(extension_dir(n).glob("*.so"))]


def announce_first_forward(model: Any, *, main: bool, delay: float = 10.0) -> None:
    """Announce a compiled model's first forward when it takes longer than ``delay`` s
    (torch.compile traces and compiles there): one-shot hooks that remove themselves."""
    announcer = Announcer(
        "torch.compile is compiling the model's first forward (again for each new input "
        "shape); on a small machine this can take minutes. Later steps run the compiled code.",
        what="torch.compile", delay=delay, main=main)
    handles: list[Any] = []

    def before(module: Any, args: Any) -> None:
        announcer.__enter__()

    def after(module: Any, args: Any, output: Any) -> None:
        announcer.__exit__(None, None, None)
        for handle in handles:
            handle.remove()

    handles.append(model.register_forward_pre_hook(before))
    handles.append(model.register_forward_hook(after))
