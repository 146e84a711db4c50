"""Checkpoints through the Accelerator: exact resume in 1 and 2 processes, crash safety
(SIGKILL during save_state at several points), corruption named by load_state and by
`accel checkpoint verify`, rotation, main-process-only saves, async saves."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.multiprocess

SCRIPTS = Path(__file__).parent / "scripts"



def test_exact_resume_in_one_process(run_here, scripts, tmp_path, capsys):
    # one process: the script runs here (a one-process launch would only add the launcher
    # and a worker interpreter; the 2-process test below goes through `accel launch`)
    run_here(scripts / "checkpoint_resume.py", str(tmp_path))
    out = capsys.readouterr().out
    assert "RESUME rank=0 exact=True" in out, out
    # total_limit=2: checkpoint_0 rotated away once checkpoint_2 was committed; a restarted
    # job's load_state() continued the numbering (no "already exists" error).
    assert json.loads((tmp_path / "result.json").read_text())["checkpoints"] == [
        "checkpoint_1", "checkpoint_2"]


@pytest.mark.shared_launch("checkpoint_resume.py", "{out}", "--async-save")
def test_exact_resume_in_two_processes_with_async_save_and_main_only_save(explain,
                                                                         shared_launch):
    # 2 processes, in the launch shared with other check scripts (conftest's shared_launch)
    proc, tmp_path = shared_launch, shared_launch.out
    assert proc.returncode == 0, explain(proc)
    for rank in (0, 1):
        assert f"RESUME rank={rank} exact=True" in proc.stdout, explain(proc)
        done = re.search(rf"MAIN-ONLY-DONE rank={rank} seconds=([\d.]+)", proc.stdout)
        assert done and float(done.group(1)) < 5, explain(proc)  # not the 20 s peer timeout
        # save on the main process + load everywhere: as fast as the all-ranks save (+ noise)
        seed = re.search(rf"SEED rank={rank} all=([\d.]+) main=([\d.]+)", proc.stdout)
        assert seed, explain(proc)
        all_ranks, main_only = float(seed.group(1)), float(seed.group(2))
        assert main_only <= 1.5 * all_ranks + 0.1, explain(proc)
    assert "MAIN-ONLY ranks=[0]" in proc.stdout, explain(proc)
    assert "saved" in proc.stderr and "alone: the other ranks went on" in proc.stderr, explain(proc)
    manifest = json.loads((tmp_path / "checkpoints" / "checkpoint_2" / "manifest.json")
                          .read_text())
    assert manifest["world_size"] == 2 and manifest["ranks"] == [0, 1]
    assert {"random_states_0.safetensors", "random_states_1.safetensors"} <= set(
        manifest["files"])


def test_save_on_each_node_gives_every_machine_a_complete_checkpoint(scripts, tmp_path):
    """Two "machines" of 2 processes on this host, each saving into its own directory (its
    own disk): each machine's local rank 0 commits a complete checkpoint holding the RNG
    states of its machine's ranks, and every rank resumes from its machine's copy.

    With 4 processes the resumed run may differ in the last bit: a fresh DDP model's first
    all-reduce uses DDP's initial gradient buckets, the uninterrupted model's had been
    rebuilt after its first step, and the sum of 4 ranks' gradients then runs in another
    order (2 ranks are exact: the other tests). State lost in the save would show as
    differences many orders of magnitude larger."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = str(probe.getsockname()[1])
    machines = [subprocess.Popen(
        [sys.executable, "-m", "accel_launch", "launch", "--cpu", "--num_machines", "2",
         "--machine_rank", str(rank), "--num_processes", "4", "--main_process_ip",
         "127.0.0.1", "--main_process_port", port, str(scripts / "checkpoint_resume.py"),
         str(tmp_path), "--each-node"], env=_env(), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True) for rank in (0, 1)]
    outputs = [m.communicate(timeout=240)[0] for m in machines]
    assert [m.returncode for m in machines] == [0, 0], "\n".join(outputs)
    for rank in range(4):
        found = re.search(rf"RESUME rank={rank} exact=\w+ saved=checkpoint_1 max_diff=(\S+)",
                          outputs[rank // 2])
        assert found and float(found.group(1)) < 1e-6, "\n".join(outputs)
    for node, ranks in ((0, [0, 1]), (1, [2, 3])):
        root = tmp_path / f"node{node}"
        assert json.loads((root / "result.json").read_text())["checkpoints"] == [
            "checkpoint_1", "checkpoint_2"]
        manifest = json.loads((root / "checkpoints" / "checkpoint_2" / "manifest.json")
                              .read_text())
        assert manifest["world_size"] == 4 and manifest["ranks"] == ranks
        assert {f"random_states_{r}.safetensors" for r in ranks} <= set(manifest["files"])
        assert "model.safetensors" in manifest["files"]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ACCEL_", "ACCELERATE_")) and k not in ("RANK", "WORLD_SIZE")}
    return {**env, "PYTHONUNBUFFERED": "1", **extra}


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _run(script: Path, work: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(script), str(work)], env=_env(**env),
                          capture_output=True, text=True, timeout=120)


def _start_gated(script: Path, work: Path, gate: Path) -> subprocess.Popen[bytes]:
    """A run that loads, trains, then waits for ``gate`` before its save (with pauses between
    files): several start together and overlap their imports, each saves when let."""
    return subprocess.Popen([sys.executable, str(script), str(work), "--gate", str(gate)],
                            env=_env(ACCEL_CHECKPOINT_TEST_DELAY="0.4"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _kill_when(proc: subprocess.Popen[bytes], gate: Path, work: Path, ready) -> None:
    """Let ``proc`` save; SIGKILL it once ``ready(staging)`` holds."""
    old = set((work / "checkpoints").glob("checkpoint_1.tmp-*"))
    gate.touch()
    deadline = time.monotonic() + 240
    try:
        while time.monotonic() < deadline:
            staging = [p for p in (work / "checkpoints").glob("checkpoint_1.tmp-*")
                       if p not in old]
            if staging and ready(staging[-1]):
                proc.send_signal(signal.SIGKILL)
                break
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.005)
        else:
            pytest.fail("the save never reached the kill point")
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def first_save(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One run of checkpoint_crash.py (its checkpoint_0), made once for the tests below, which
    each start from a copy (the run is the same for both: one interpreter less)."""
    work = tmp_path_factory.mktemp("first_save")
    first = _run(SCRIPTS / "checkpoint_crash.py", work)
    assert first.returncode == 0 and "SAVED" in first.stdout, (
        f"exit {first.returncode}\n--- stdout\n{first.stdout}\n--- stderr\n{first.stderr}")
    return work


def _copy_of(first_save: Path, tmp_path: Path) -> Path:
    work = tmp_path / "work"
    shutil.copytree(first_save, work)
    return work


def test_sigkill_during_save_keeps_previous_checkpoint_and_refuses_partial(run_here, scripts,
                                                                           first_save, tmp_path,
                                                                           capsys):
    from accel_launch.cli import main

    script = scripts / "checkpoint_crash.py"
    tmp_path = _copy_of(first_save, tmp_path)
    before = _tree(tmp_path)
    kill_points = [
        lambda s: any(s.iterdir()),  # while the first (largest) file is being written
        lambda s: (s / "optimizer.safetensors").exists(),  # between files
        lambda s: (s / "manifest.json").exists(),  # manifest written, rename not done
    ]
    gates = [tmp_path.parent / f"gate{i}" for i in range(len(kill_points))]
    runs = [_start_gated(script, tmp_path, gate) for gate in gates]
    try:
        for run, gate, ready in zip(runs, gates, kill_points, strict=True):
            _kill_when(run, gate, tmp_path, ready)
            after = _tree(tmp_path)
            assert {k: after.get(k) for k in before} == before  # nothing earlier changed
            assert not (tmp_path / "checkpoints" / "checkpoint_1").exists()
    finally:
        for run in runs:
            run.kill()
            run.wait()
    staging = sorted((tmp_path / "checkpoints").glob("checkpoint_1.tmp-*"))
    assert len(staging) == 3
    # `accel checkpoint list / verify` through the CLI's own main, in this process
    capsys.readouterr()
    main(["checkpoint", "list", str(tmp_path / "checkpoints")])
    listing = capsys.readouterr()
    statuses = [line.split()[0] for line in listing.out.splitlines()]
    assert sorted(statuses) == ["ok", "partial", "partial", "partial"], listing
    complete = next(p for p in staging if (p / "manifest.json").exists())
    code = main(["checkpoint", "verify", str(complete)])  # manifest or not
    refused = capsys.readouterr()
    assert code == 1 and complete.name in refused.err, refused
    # The next run resumes from checkpoint_0 (newest verified) and saves checkpoint_1 (here,
    # in the test's process: the same code path as `python script`, one interpreter less).
    run_here(script, str(tmp_path))
    again = capsys.readouterr().out
    assert "LOADED step=1" in again, again
    assert "checkpoint_1" in again.split("SAVED", 1)[1], again


def test_flipped_byte_is_named_by_load_state_and_verify(run_here, scripts, first_save, tmp_path,
                                                        capsys):
    from accel_checkpoint.errors import CorruptCheckpointError

    script = scripts / "checkpoint_crash.py"
    tmp_path = _copy_of(first_save, tmp_path)
    target = tmp_path / "checkpoints" / "checkpoint_0" / "model.safetensors"
    data = bytearray(target.read_bytes())
    data[len(data) // 3] ^= 0x10
    target.write_bytes(bytes(data))
    # the resuming run, in this process: its load_state raises, naming the file
    with pytest.raises(CorruptCheckpointError, match="model.safetensors"):
        run_here(script, str(tmp_path))
    assert "SAVING" not in capsys.readouterr().out  # nothing trained on from a bad load
    from accel_launch.cli import main

    capsys.readouterr()
    code = main(["checkpoint", "verify", str(target.parent)])
    verify = capsys.readouterr()
    assert code == 1, verify
    assert "model.safetensors" in verify.err and "xxh3-128" in verify.err, verify
