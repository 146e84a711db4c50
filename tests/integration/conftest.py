"""Helpers for tests that start real processes through `accel launch`.

Each launch costs the launcher's and every worker's torch import (seconds of CPU on the
2-core CI box), so a 2-process check script that needs nothing of its own from the
launcher (no flag but ``--cpu --num_processes 2``, no fresh interpreter, no timing) is
marked ``shared_launch``: the selected ones run one after another in one launch
(scripts/run_several.py) and each test reads its script's own output. One-process runs
go through ``run_here`` (the test's own interpreter)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = Path(__file__).parent / "scripts"


def accel_launch(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """Run ``accel launch ARGS`` in a subprocess; returns the finished process (text output)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ACCEL_", "ACCELERATE_")) and k not in ("RANK", "WORLD_SIZE")}
    env["PYTHONUNBUFFERED"] = "1"
    return subprocess.run([sys.executable, "-m", "accel_launch", "launch", *args], cwd=REPO,
                          env=env, capture_output=True, text=True, timeout=timeout)


def explain(proc: subprocess.CompletedProcess[str], tail: int | None = None) -> str:
    """A finished process's exit code and output, for assertion messages (``tail``: keep
    only that many last characters of stderr)."""
    stderr = proc.stderr[-tail:] if tail else proc.stderr
    return f"exit {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{stderr}"


def run_script_here(script: Path, *argv: str) -> None:
    """Run ``script`` as ``__main__`` in the test's own process, as ``python script ARGV``
    would in a one-process launch: the same Accelerator code path without starting the launcher and
    a worker (two interpreters that import torch). Its folder is importable meanwhile; the
    global RNG states it seeds are restored and a process group it leaves is destroyed."""
    import random
    import runpy

    import torch
    import torch.distributed as dist

    saved_argv, saved_path = sys.argv, list(sys.path)
    saved_rng = random.getstate(), torch.random.get_rng_state()
    sys.argv, sys.path[:0] = [str(script), *argv], [str(script.parent)]
    try:
        runpy.run_path(str(script), run_name="__main__")
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
        random.setstate(saved_rng[0])
        torch.random.set_rng_state(saved_rng[1])
        if dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "shared_launch(script, *args, env={}): the test's 2-process run of "
        "scripts/SCRIPT ARGS ({out}: a folder of its own; env: variables a launcher flag "
        "would set) shares one launch with the other selected tests so marked (the "
        "shared_launch fixture gives its result)")


@pytest.fixture(scope="session")
def _shared_launches(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
                     ) -> dict[str, SimpleNamespace]:
    """One ``accel launch`` of scripts/run_several.py for every selected test marked
    ``shared_launch``, in collection order: each script's own output, per test. A script
    that fails ends its launch; the scripts after it then run in a launch of their own."""
    root = tmp_path_factory.mktemp("shared_launch")
    runs = []  # (nodeid, key, argv)
    for item in request.session.items:
        mark = item.get_closest_marker("shared_launch")
        if mark is not None:
            script, *args = mark.args
            key = f"{len(runs):02d}-{Path(script).stem}"
            (root / key).mkdir()
            path = REPO / script if "/" in script else SCRIPTS / script
            env = [arg for name, value in mark.kwargs.get("env", {}).items()
                   for arg in ("--env", f"{name}={value}")]
            runs.append((item.nodeid, key, [*env, key, str(path),
                                            *(arg.format(out=root / key) for arg in args)]))
    results, pending = {}, runs
    while pending:
        argv = [arg for index, (_, _, own) in enumerate(pending)
                for arg in ([] if index == 0 else ["--next"]) + own]
        timeout = 180 + 60 * len(pending)
        try:
            proc = accel_launch("--cpu", "--num_processes", "2",
                                str(SCRIPTS / "run_several.py"), str(root), *argv,
                                timeout=timeout)
        except subprocess.TimeoutExpired as hung:  # the first unfinished script is named
            err = hung.stderr.decode() if isinstance(hung.stderr, bytes) else hung.stderr
            proc = SimpleNamespace(returncode=124,
                                   stderr=f"timed out after {timeout} s\n{err or ''}")
        for position, (nodeid, key, _) in enumerate(pending):
            def read(suffix: str, key: str = key) -> str:
                files = [root / f"{key}.rank{rank}.{suffix}" for rank in (0, 1)]
                return "".join(f.read_text() for f in files if f.exists())

            done = all((root / f"{key}.rank{rank}.done").exists() for rank in (0, 1))
            stderr = read("err")
            if not done:  # the one that failed: the launch's own output tells the rest
                stderr += (f"\n--- {key} did not finish; its shared launch: exit "
                           f"{proc.returncode}\n{proc.stderr[-6000:]}")
            results[nodeid] = SimpleNamespace(returncode=0 if done else (proc.returncode or 1),
                                              stdout=read("out"), stderr=stderr, out=root / key)
            if not done:
                pending = pending[position + 1:]
                break
        else:
            pending = []
    return results


@pytest.fixture
def shared_launch(request: pytest.FixtureRequest, _shared_launches) -> SimpleNamespace:
    """This test's run in the shared launch (see ``shared_launch`` marker): ``returncode``
    (0 when the script returned on both ranks), ``stdout`` and ``stderr`` (rank 0's, then
    rank 1's), ``out`` (the folder that ``{out}`` named)."""
    return _shared_launches[request.node.nodeid]


@pytest.fixture(scope="session")
def launch():
    return accel_launch


@pytest.fixture
def run_here():
    return run_script_here


@pytest.fixture(name="explain")
def explain_fixture():
    return explain


@pytest.fixture(scope="session")
def scripts() -> Path:
    return SCRIPTS


@pytest.fixture
def repo() -> Path:
    return REPO
