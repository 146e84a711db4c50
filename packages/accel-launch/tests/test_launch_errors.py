"""Bad input to `accel launch`: one clear line on stderr, non-zero exit, nothing started."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from accel_launch.cli import main
from accel_launch.elastic import describe_failures, exit_code_of, find_free_port, is_port_in_use
from torch.distributed.elastic.multiprocessing.errors import ProcessFailure


@pytest.fixture
def script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text("raise SystemExit('must never run')\n")
    return "train.py"


def _error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = [line for line in capsys.readouterr().err.strip().splitlines()
           if "could not load the command" not in line]  # another package's broken plug-in
    assert len(err) == 1, err
    assert err[0].startswith("accel launch: error: ")
    return err[0]


@pytest.mark.parametrize("value", ["0", "-3"])
def test_non_positive_num_processes(value: str, script: str,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["launch", "--cpu", "--num_processes", value, script]) == 2
    line = _error_line(capsys)
    assert f"--num_processes {value}" in line and "positive" in line


def test_missing_script(script: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["launch", "--cpu", "nope.py", "--x"]) == 2
    line = _error_line(capsys)
    assert "'nope.py' not found" in line and "--module" in line


def test_missing_program_with_no_python(script: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["launch", "--cpu", "--no_python", "no-such-program-xyz"]) == 2
    assert "'no-such-program-xyz' not found" in _error_line(capsys)


def test_port_in_use(script: str, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert is_port_in_use(port)
        assert main(["launch", "--cpu", "--main_process_port", str(port), script]) == 2
    line = _error_line(capsys)
    assert f"--main_process_port {port} is already in use" in line
    assert "another port" in line


def test_free_port_is_free_and_never_29500() -> None:
    port = find_free_port()
    assert port != 29500 and not is_port_in_use(port)


def test_machine_rank_out_of_range(script: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["launch", "--num_machines", "2", "--machine_rank", "2", "--main_process_ip",
                 "10.1.1.1", "--main_process_port", "29400", script]) == 2
    line = _error_line(capsys)
    assert "--machine_rank 2" in line and "between 0 and" in line


def test_multi_machine_without_ip(script: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["launch", "--num-machines", "2", "--main_process_port", "29400", script]) == 2
    line = _error_line(capsys)
    assert "--num_machines 2 needs --main_process_ip" in line


def _failure(local_rank: int, exitcode: int, tmp_path: Path) -> ProcessFailure:
    return ProcessFailure(local_rank=local_rank, pid=1000 + local_rank, exitcode=exitcode,
                          error_file=str(tmp_path / "absent.json"))


def test_describe_failures_names_ranks_root_first(tmp_path: Path) -> None:
    text = describe_failures({0: _failure(0, -15, tmp_path), 1: _failure(1, 3, tmp_path)},
                             root=1)
    assert text.startswith("rank 1 (local rank 1, pid 1001) exited with code 3; "
                           "rank 0 (local rank 0, pid 1000) was killed by signal SIGTERM")
    assert "\n" not in text


def test_exit_code_of() -> None:
    assert exit_code_of(3) == 3
    assert exit_code_of(-9) == 137
    assert exit_code_of(0) == 1
    assert exit_code_of(300) == 255


@pytest.mark.multiprocess
def test_unreachable_rendezvous_is_one_launch_error(run_accel, tmp_path: Path) -> None:
    # Machine 1 of 2 with nobody serving the rendezvous: no worker ever starts.
    (tmp_path / "train.py").write_text("raise SystemExit('must never run')\n")
    port = find_free_port()
    result = run_accel("launch", "--cpu", "--num_machines", "2", "--machine_rank", "1",
                       "--main_process_ip", "127.0.0.1", "--main_process_port", str(port),
                       "--rdzv_timeout", "2", "train.py", timeout=90)
    assert result.returncode == 1, result
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"accel launch: error: machine 0 at 127.0.0.1:{port} did not answer "
                           "within 2 s (--rdzv_timeout): nothing listens there yet (connection "
                           "refused).")
    assert "--main_process_port" in last
