"""Several 2-process check scripts in one launch, one after another in the same processes:
each runs as ``python SCRIPT ARGS`` would run it (``__main__``), so the launch pays the
launcher's and the workers' torch imports once instead of once per script.

argv: an output folder, then ``KEY SCRIPT ARGS... --next KEY SCRIPT ARGS...``, each run
optionally led by ``--env NAME=VALUE`` pairs (what a launcher flag would have set). Each
script's stdout and stderr (file descriptors 1 and 2) go to ``OUT/KEY.rank<r>.out`` /
``.err``; ``OUT/KEY.rank<r>.done`` is written when it returned on that rank. A script
that raises ends the launch (the scripts after it do not run; the launcher stops the
other rank). Between two scripts: the environment, ``sys.argv``, ``sys.path``, the
warning filters (warnings show again), the state singletons and torch's default
generator are as a fresh process has them; the default process group stays (see
``_keep_the_default_group``). Used by conftest's ``shared_launch``.
"""

from __future__ import annotations

import contextlib
import os
import runpy
import sys
import traceback
import warnings
from pathlib import Path

import torch
import torch.distributed as dist


def _fresh_state() -> None:
    """The state singletons, and the registries filled from entry points (a later script
    may put a plugin on sys.path first, as tests/plugins' users do)."""
    import importlib

    from accel.state import AcceleratorState
    from accel.tracking import TRACKERS
    from accel_parallel import STRATEGIES
    from accel_state import GradientState, PartialState

    AcceleratorState._reset_state()
    GradientState._reset_state()
    PartialState._reset_state()
    STRATEGIES._clear()
    TRACKERS._clear()
    importlib.invalidate_caches()


@contextlib.contextmanager
def _output_to(out: Path, err: Path):
    """File descriptors 1 and 2 into ``out`` / ``err`` (print, loggers made earlier, C code
    alike), back afterwards."""
    saved = []
    for stream, fd, path in ((sys.stdout, 1, out), (sys.stderr, 2, err)):
        stream.flush()
        saved.append(os.dup(fd))
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(target, fd)
        os.close(target)
    try:
        yield
    finally:
        for stream, fd, old in ((sys.stdout, 1, saved[0]), (sys.stderr, 2, saved[1])):
            stream.flush()
            os.dup2(old, fd)
            os.close(old)


def run_one(key: str, script: str, argv: list[str], out: Path, rank: str, seed: int,
            env: dict[str, str]) -> None:
    environ, filters = dict(os.environ), warnings.filters[:]
    os.environ.update(env)
    torch.manual_seed(seed)  # what a fresh interpreter's default generator holds
    sys.argv, path = [script, *argv], list(sys.path)
    sys.path.insert(0, str(Path(script).parent))  # as `python SCRIPT` puts it first
    with _output_to(out / f"{key}.rank{rank}.out", out / f"{key}.rank{rank}.err"):
        try:
            runpy.run_path(script, run_name="__main__")
        except SystemExit as exit_:
            if exit_.code not in (None, 0):
                traceback.print_exc()
                raise
        except BaseException:
            traceback.print_exc()
            raise
    sys.path[:] = path
    os.environ.clear()
    os.environ.update(environ)
    warnings.resetwarnings()  # also lets a warning shown by an earlier script show again
    warnings.filters[:] = filters
    _fresh_state()
    (out / f"{key}.rank{rank}.done").touch()


def _keep_the_default_group(destroy):
    """``destroy_process_group()`` of the default group becomes a no-op while the scripts
    run (the next script adopts the group, as PartialState does): torch numbers a new
    default group from 0 again, so its re-made group would read the old one's addresses
    from the launcher's store and may fail to connect. Other groups are destroyed."""
    def keep(group=None):
        if group is not None and group is not dist.GroupMember.WORLD:
            destroy(group)
    return keep


def main(argv: list[str]) -> None:
    destroy = dist.destroy_process_group
    dist.destroy_process_group = _keep_the_default_group(destroy)
    try:
        _run_all(argv)
    finally:
        dist.destroy_process_group = destroy  # the owner's exit hook destroys it for real


def _run_all(argv: list[str]) -> None:
    out, rest = Path(argv[0]), argv[1:]
    rank, seed = os.environ["RANK"], torch.initial_seed()
    runs, current = [], []
    for arg in rest:
        if arg == "--next":
            runs.append(current)
            current = []
        else:
            current.append(arg)
    runs.append(current)
    for run in runs:
        env = {}
        while run[0] == "--env":  # --env NAME=VALUE: set for this script only
            name, _, value = run[1].partition("=")
            env[name], run = value, run[2:]
        key, script, *args = run
        run_one(key, script, args, out, rank, seed, env)
        print(f"RUN-SEVERAL-DONE {key} rank={rank}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
