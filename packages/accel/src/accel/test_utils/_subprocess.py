"""Launching tests in subprocesses: ``get_launch_command`` (an ``accel launch`` command line)
and ``execute_subprocess_async``/``run_command``, which run one and report its output."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

__all__ = ["SubprocessCallException", "execute_subprocess_async", "get_launch_command",
           "run_command"]


def _accel_command() -> list[str]:
    """``["accel"]`` when the CLI is on PATH; else the ``accel`` next to this interpreter;
    else ``python -m accel_launch`` (the same CLI), so a launched test never depends on PATH."""
    if shutil.which("accel"):
        return ["accel"]
    sibling = Path(sys.executable).with_name("accel")
    if sibling.is_file():
        return [str(sibling)]
    return [sys.executable, "-m", "accel_launch"]


def get_launch_command(**kwargs: Any) -> list[str]:
    """``accel launch`` plus one ``--key=value`` per keyword (``--key`` alone for True; None
    is left out; False stays ``--key=False``, as in Accelerate, for the flags that take a
    boolean value), e.g. ``get_launch_command(num_processes=2)`` gives
    ``["accel", "launch", "--num_processes=2"]``. accel launch takes every accelerate launch
    flag, so Accelerate's tests keep their keywords."""
    command = [*_accel_command(), "launch"]
    for key, value in kwargs.items():
        if value is True:
            command.append(f"--{key}")
        elif value is not None:
            command.append(f"--{key}={value}")
    return command


class _RunOutput:
    """A finished subprocess: its return code and its stdout/stderr lines."""

    def __init__(self, returncode: int, stdout: list[str], stderr: list[str]) -> None:
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr


async def _pump(stream: asyncio.StreamReader, sink: list[str],
                echo: Callable[[str], None] | None) -> None:
    while line := await stream.readline():
        text = line.decode("utf-8", errors="replace").rstrip()
        sink.append(text)
        if echo is not None:
            echo(text)


def _printer(label: str, pipe: IO[str]) -> Callable[[str], None]:
    return lambda text: print(label, text, file=pipe)


async def _stream(cmd: list[str], env: Mapping[str, str] | None, stdin: Any,
                  quiet: bool) -> _RunOutput:
    proc = await asyncio.create_subprocess_exec(
        cmd[0], *cmd[1:], stdin=stdin, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env=None if env is None else dict(env))
    out: list[str] = []
    err: list[str] = []
    assert proc.stdout is not None and proc.stderr is not None  # both are PIPE above
    await asyncio.gather(
        _pump(proc.stdout, out, None if quiet else _printer("stdout:", sys.stdout)),
        _pump(proc.stderr, err, None if quiet else _printer("stderr:", sys.stderr)))
    return _RunOutput(await proc.wait(), out, err)


def execute_subprocess_async(cmd: list[Any], env: Mapping[str, str] | None = None,
                             stdin: Any = None, timeout: float | None = 180,
                             quiet: bool = False, echo: bool = True) -> _RunOutput:
    """Run ``cmd``, streaming its output line by line (prefixed ``stdout:``/``stderr:``
    unless ``quiet``) while keeping it, and return it; a non-zero exit (a signal too) raises
    RuntimeError with the workers' stderr. ``timeout`` is accepted for Accelerate's callers
    but, as in Accelerate, never ends the process: long multi-process tests rely on that."""
    cmd = [str(part) if isinstance(part, Path) else part for part in cmd]
    if echo:
        print("\nRunning: ", " ".join(cmd))
    result = asyncio.run(_stream(cmd, env, stdin, quiet))
    if result.returncode != 0:
        stderr = "\n".join(result.stderr)
        raise RuntimeError(f"'{' '.join(cmd)}' failed with returncode {result.returncode}\n\n"
                           f"The combined stderr from workers follows:\n{stderr}")
    return result


class SubprocessCallException(Exception):
    """``run_command``'s command failed; the message has its combined output."""


def run_command(command: list[Any], return_stdout: bool = False,
                env: Mapping[str, str] | None = None) -> str | None:
    """Run ``command`` to completion (stderr folded into stdout); return the output when
    ``return_stdout``; raise SubprocessCallException with the output when it fails."""
    command = [str(part) if isinstance(part, Path) else part for part in command]
    try:
        output = subprocess.check_output(command, stderr=subprocess.STDOUT,
                                         env=None if env is None else dict(env))
    except subprocess.CalledProcessError as exc:
        raise SubprocessCallException(
            f"Command `{' '.join(command)}` failed with the following error:\n\n"
            f"{exc.output.decode(errors='replace')}") from exc
    return output.decode("utf-8", errors="replace") if return_stdout else None
