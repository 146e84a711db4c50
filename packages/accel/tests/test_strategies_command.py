"""`accel strategies` (issue 40.5): the installed strategies and presets with package,
priority and typed options, and which one a launch would choose and why."""

from __future__ import annotations

import subprocess
import sys

import pytest
from accel_launch.cli import main


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(["strategies", *argv]) == 0
    return capsys.readouterr().out


def test_lists_strategies_by_priority_with_their_options_and_presets(capsys) -> None:
    out = _run(capsys, "--cpu")
    names = [line.split()[0] for line in out.splitlines() if " priority " in line]
    builtins = ["deepspeed", "pipeline", "nd", "fsdp", "ddp", "single"]
    assert [name for name in names if name in builtins] == builtins  # highest priority first
    ddp = next(line for line in out.splitlines() if line.startswith("  ddp "))
    assert "priority 10" in ddp and "accel-parallel" in ddp
    assert "      find_unused_parameters: true or false = False" in out
    assert "      comm_hook: one of 'no', 'fp16', 'bf16'" in out
    assert "      zero_stage: an integer or null = None" in out
    assert "  zero3                  = deepspeed with zero_stage=3  (accel-parallel)" in out


@pytest.mark.parametrize(("flags", "expected"), [
    (["--cpu"], ["single                 0    claims it  <- chosen",
                 "would run: 'single' (chosen by the configuration, priority 0)"]),
    (["--cpu", "--num_processes", "2"], ["ddp                    10   claims it  <- chosen"]),
    (["--cpu", "--num_processes", "2", "--use_fsdp"],
     ["fsdp                   50   claims it  <- chosen", "ddp                    10   claims it",
      "would run: 'fsdp' (chosen by the configuration, priority 50)"]),
    (["--cpu", "--strategy", "ddp"],
     ["would run: 'ddp' (named by ACCEL_STRATEGY", "would be refused: Strategy 'ddp' (named by "
      "ACCEL_STRATEGY (accel launch --strategy, a config file's strategy:)) cannot run here: "
      "DistributedDataParallel needs a process group"]),
    (["--cpu", "--num_processes", "2", "--strategy", "ddp", "--use_fsdp"],
     ["would be refused: The fsdp plugin (fsdp_plugin= or accel launch --use_fsdp) is not "
      "used: strategy 'ddp'"]),
])
def test_says_which_one_a_launch_would_choose_and_why(capsys, flags, expected) -> None:
    out = _run(capsys, *flags)
    assert "this launch:" in out
    for text in expected:
        assert text in out, out


def test_reads_the_config_file(capsys, tmp_path) -> None:
    config = tmp_path / "launch.yaml"
    config.write_text("use_cpu: true\nnum_processes: 2\nstrategy: ddp\n"
                      "strategy_config:\n  bucket_cap_mb: 50\n")
    out = _run(capsys, "--config_file", str(config))
    assert f"this launch: 2 process(es) on cpu, config file: config file {config}" in out
    assert "would run: 'ddp' (named by ACCEL_STRATEGY" in out
    assert "would be refused" not in out


def test_a_bad_option_is_refused_as_accel_launch_refuses_it(capsys) -> None:
    code = main(["strategies", "--cpu", "--strategy", "ddp", "--strategy_config",
                 '{"bucket_cap_mb": "big"}'])
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("accel strategies: error: --strategy_config (from command line) gives "
                          "bucket_cap_mb='big' for strategy 'ddp', but DistributedDataParallel"
                          "Kwargs.bucket_cap_mb expects an integer"), err


def test_help_lists_it_without_importing_torch() -> None:
    probe = ("import sys\nfrom accel_launch.cli import main\n"
             "try:\n    main({argv!r})\nexcept SystemExit:\n    pass\n"
             "print('TORCH=' + str(any(m.split('.')[0] == 'torch' for m in sys.modules)))\n")
    for argv in (["--help"], ["strategies", "--help"]):
        proc = subprocess.run([sys.executable, "-c", probe.format(argv=argv)],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        assert "strategies" in proc.stdout and "TORCH=False" in proc.stdout, proc.stdout
