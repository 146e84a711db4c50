"""The orphan guard and the stuck-signal watch of `accel launch` (accel_launch.lifeline),
with plain sleeping processes: no torch, no launch."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from accel_launch.lifeline import Lifeline, _stack_of, blocked_at
from accel_launch.orphans import marked_processes, stop_marked

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="the orphan guard reads /proc (Linux only)")

_SLEEP = [sys.executable, "-c", "import time; time.sleep(60)"]
_IGNORES_TERM = [sys.executable, "-c", "import signal, time; "
                 "signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); "
                 "time.sleep(60)"]


def _start(cmd: list[str], marker: str) -> subprocess.Popen[str]:
    name, _, token = marker.partition("=")
    return subprocess.Popen(cmd, env={**os.environ, name: token}, text=True,
                            stdout=subprocess.PIPE, start_new_session=True)


def test_marked_processes_are_found_and_stopped_even_when_they_ignore_sigterm() -> None:
    marker = f"ACCEL_LAUNCH_ID=test.{os.getpid()}.a"
    polite, stubborn = _start(_SLEEP, marker), _start(_IGNORES_TERM, marker)
    other = _start(_SLEEP, f"ACCEL_LAUNCH_ID=test.{os.getpid()}.b")
    try:
        assert stubborn.stdout.readline().strip() == "ready"
        assert sorted(marked_processes(marker.encode())) == sorted([polite.pid, stubborn.pid])
        start = time.monotonic()
        assert stop_marked(marker.encode(), grace=1.0) == 2
        assert polite.wait(5) == -signal.SIGTERM
        assert stubborn.wait(5) == -signal.SIGKILL  # after the grace
        assert 0.9 < time.monotonic() - start < 5
        assert other.poll() is None, "a process of another launch was stopped"
    finally:
        for proc in (polite, stubborn, other):
            proc.kill()
            proc.wait(5)


def test_the_guard_stops_the_workers_of_a_launcher_killed_with_sigkill() -> None:
    # a stand-in launcher: enters the Lifeline, starts a marked "worker", blocks
    code = ("import os, subprocess, sys, time\n"
            "from accel_launch.lifeline import Lifeline\n"
            "with Lifeline(1.0) as life:\n"
            "    w = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'],\n"
            "                         env={**os.environ, **life.env}, start_new_session=True)\n"
            "    print(w.pid, flush=True)\n"
            "    time.sleep(60)\n")
    launcher = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                                text=True)
    worker = int(launcher.stdout.readline())
    try:
        launcher.kill()
        launcher.wait(5)
        deadline = time.monotonic() + 10
        while os.path.exists(f"/proc/{worker}") and _state(worker) != "Z":
            assert time.monotonic() < deadline, "the worker outlived its launcher"
            time.sleep(0.1)
    finally:
        try:
            os.kill(worker, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def test_only_a_thread_blocked_in_one_call_from_a_blocking_site_counts_as_stuck() -> None:
    main = threading.main_thread().ident
    looks: list[tuple] = []

    def look_twice() -> None:
        time.sleep(0.5)  # the main thread reaches its read meanwhile
        looks.append(_stack_of(main))
        time.sleep(0.3)
        looks.append(_stack_of(main))

    read_end, write_end = os.pipe()
    thread = threading.Thread(target=look_twice)
    thread.start()
    threading.Timer(1.5, os.write, (write_end, b"x")).start()
    os.read(read_end, 1)  # one native call, made from this file
    thread.join()
    os.close(read_end)
    os.close(write_end)
    before, after = looks
    assert blocked_at(before, after, sites=("test_lifeline.py",))
    assert not blocked_at(before, after)  # not torch's store or rendezvous code
    moved = ((before[0][0], before[0][1] + 2, before[0][2]), *before[1:])
    assert not blocked_at(before, moved, sites=("test_lifeline.py",))


def test_a_lifeline_ends_quietly_and_restores_the_wakeup_fd() -> None:
    before = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(before)
    start = time.monotonic()
    with Lifeline(1.0) as life:
        assert list(life.env) == ["ACCEL_LAUNCH_ID"]
    assert time.monotonic() - start < 3
    assert signal.set_wakeup_fd(before) == before
