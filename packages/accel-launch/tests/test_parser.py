"""AccelArgumentParser: both flag spellings, no prefix matching, strict unknown flags."""

from __future__ import annotations

import argparse

import pytest
from accel_launch.launch import launch_command_parser
from accel_launch.parser import AccelArgumentParser, alternate_spellings


def test_alternate_spellings_of_long_flags_only() -> None:
    assert alternate_spellings(["--num_processes"]) == ["--num-processes"]
    assert alternate_spellings(["--main-process-ip"]) == ["--main_process_ip"]
    assert alternate_spellings(["-m", "--module"]) == []


@pytest.mark.parametrize("flag", ["--num_processes", "--num-processes"])
def test_both_spellings_set_the_same_destination(flag: str) -> None:
    args = launch_command_parser().parse_args([flag, "3", "train.py"])
    assert args.num_processes == 3


def test_twins_work_inside_argument_groups_and_mixed_spellings() -> None:
    args = launch_command_parser().parse_args(
        ["--num-cpu-threads-per-process", "2", "--main_process_port", "1234",
         "--mixed-precision", "bf16", "--no-python", "prog"])
    assert (args.num_cpu_threads_per_process, args.main_process_port) == (2, 1234)
    assert args.mixed_precision == "bf16" and args.no_python


def test_script_arguments_are_passed_through_untouched() -> None:
    args = launch_command_parser().parse_args(
        ["--cpu", "train.py", "--num-processes", "7", "--cpu", "-m", "x", "--foo_bar=1"])
    assert args.training_script == "train.py"
    assert args.training_script_args == ["--num-processes", "7", "--cpu", "-m", "x",
                                         "--foo_bar=1"]
    assert args.num_processes is None and not args.module


def test_help_shows_the_declared_spelling_only() -> None:
    text = launch_command_parser().format_help()
    assert "--num_processes N" in text
    assert "--num-processes" not in text.replace("(--num-processes)", "")


def test_unknown_flag_is_an_error_with_a_suggestion(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        launch_command_parser().parse_args(["--num_procs", "2", "train.py"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "usage: accel launch" in err
    assert "unknown flag --num_procs (did you mean --num_processes?)" in err


def test_prefixes_are_not_silently_accepted(capsys: pytest.CaptureFixture[str]) -> None:
    # Plain argparse would take --num_proc as --num_processes.
    with pytest.raises(SystemExit):
        launch_command_parser().parse_args(["--num_proc", "2", "train.py"])
    assert "--num_proc" in capsys.readouterr().err


def test_declaring_both_spellings_separately_is_a_conflict() -> None:
    parser = AccelArgumentParser(prog="x")
    parser.add_argument("--a_b", "--a-b", dest="both")  # both in one call: fine
    assert parser.parse_args(["--a-b", "2"]).both == "2"
    parser.add_argument("--c_d")
    with pytest.raises(argparse.ArgumentError, match="conflicting option string: --c-d"):
        parser.add_argument("--c-d")


def test_subparsers_inherit_the_class() -> None:
    parser = AccelArgumentParser(prog="x")
    sub = parser.add_subparsers(dest="cmd").add_parser("verb")
    assert isinstance(sub, AccelArgumentParser)
    sub.add_argument("--some_flag", type=int)
    assert parser.parse_args(["verb", "--some-flag", "4"]).some_flag == 4
    with pytest.raises(SystemExit):
        parser.parse_args(["verb", "--other", "4"])
    assert isinstance(parser.parse_args(["verb"]), argparse.Namespace)
