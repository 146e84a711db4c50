"""accel_state.progress: the beacon a worker keeps for the launcher's hang watchdog."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from accel_state import progress


@pytest.fixture
def beacon_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ACCEL_WATCHDOG_DIR", str(tmp_path))
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("LOCAL_RANK", "1")
    progress.detach()
    yield tmp_path
    progress.detach()


def test_without_the_launcher_the_beacon_is_a_private_counter(monkeypatch, tmp_path) -> None:
    monkeypatch.delenv("ACCEL_WATCHDOG_DIR", raising=False)
    progress.detach()
    try:
        view = progress.attach()
        view[0] += 1
        assert view[0] == 1 and progress.attach() is view  # one per process
        assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL
    finally:
        progress.detach()


def test_steps_reach_the_launcher_through_the_file(beacon_env: Path) -> None:
    view = progress.attach()
    for _ in range(5):
        view[0] += 1
    seen = progress.read_progress(str(beacon_env))
    assert list(seen) == [3]
    p = seen[3]
    assert (p.steps, p.pid, p.rank, p.local_rank) == (5, os.getpid(), 3, 1)
    assert p.stack_path == progress.stack_path(str(beacon_env), 3)


def _where_we_are_now() -> None:
    os.kill(os.getpid(), signal.SIGUSR1)
    time.sleep(0.05)


def test_sigusr1_writes_every_threads_stack(beacon_env: Path) -> None:
    progress.attach()
    _where_we_are_now()
    text = Path(progress.stack_path(str(beacon_env), 3)).read_text()
    assert "in _where_we_are_now" in text and "most recent call first" in text
    progress.detach()
    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL


def test_a_scripts_own_sigusr1_handler_is_left_alone(beacon_env: Path) -> None:
    calls = []
    previous = signal.signal(signal.SIGUSR1, lambda *a: calls.append(a))
    try:
        view = progress.attach()
        assert view[1] == 0  # no pid: the launcher must not signal this rank
        os.kill(os.getpid(), signal.SIGUSR1)
        time.sleep(0.05)
        assert calls, "the script's handler was replaced"
        assert progress.read_progress(str(beacon_env))[3].pid == 0
    finally:
        signal.signal(signal.SIGUSR1, previous)


def test_read_progress_skips_partial_and_foreign_files(tmp_path: Path) -> None:
    (tmp_path / "rank-1.progress").write_bytes(b"\0" * 8)  # still being created
    (tmp_path / "notes.txt").write_text("x")
    (tmp_path / "rank-2.progress").write_bytes(bytes(32))  # header not written yet
    assert progress.read_progress(str(tmp_path)) == {}
    assert progress.read_progress(str(tmp_path / "missing")) == {}


def test_an_unusable_folder_never_breaks_training(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ACCEL_WATCHDOG_DIR", str(tmp_path / "gone"))
    monkeypatch.setenv("RANK", "0")
    progress.detach()
    try:
        view = progress.attach()
        view[0] += 1  # still counts, privately
        assert view[0] == 1 and not (tmp_path / "gone").exists()
    finally:
        progress.detach()
