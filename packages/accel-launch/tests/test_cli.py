"""The `accel` entry point: verbs from the accel.cli entry-point group, lazy torch."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from importlib import metadata
from pathlib import Path

import pytest
from accel_launch.cli import ENTRY_POINT_GROUP, build_parser, main, verb_entry_points


def _ep(name: str, value: str) -> metadata.EntryPoint:
    return metadata.EntryPoint(name=name, value=value, group=ENTRY_POINT_GROUP)


def test_builtin_verbs_come_from_the_entry_point_group() -> None:
    names = {ep.name: ep.value for ep in verb_entry_points()}
    assert names["launch"] == "accel_launch.launch:register"
    assert names["env"] == "accel_launch.env_command:register"
    choices = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    assert {"launch", "env"} <= set(choices)


def test_third_party_verb_registers_like_a_builtin(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "thirdparty_verb.py").write_text(textwrap.dedent("""
        def _hello(args):
            print(f"hello {args.who_is_it}")
            return 5

        def register(subparsers):
            parser = subparsers.add_parser("hello", help="say hello")
            parser.add_argument("--who_is_it", default="world")
            parser.set_defaults(func=_hello)
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    parser = build_parser([_ep("hello", "thirdparty_verb:register")])
    args = parser.parse_args(["hello", "--who-is-it", "you"])
    assert args.func(args) == 5
    assert capsys.readouterr().out == "hello you\n"


def test_broken_verb_is_a_warning_not_a_crash(capsys: pytest.CaptureFixture[str]) -> None:
    good = [ep for ep in verb_entry_points() if ep.name == "env"]
    parser = build_parser([_ep("broken", "no_such_module_for_accel_tests:register"), *good])
    err = capsys.readouterr().err
    assert "accel: warning: could not load the command 'broken'" in err
    assert "ModuleNotFoundError" in err
    assert parser.parse_args(["env"]).func is not None


def test_no_verb_prints_help_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "launch" in capsys.readouterr().err


def test_unknown_verb_is_an_argparse_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["lanch"])
    assert exc.value.code == 2
    assert "invalid choice: 'lanch'" in capsys.readouterr().err


_PROBE = """
import sys
from accel_launch.cli import main
try:
    main({argv!r})
except SystemExit:
    pass
print("TORCH_IMPORTED=" + str(any(m == "torch" or m.startswith("torch.") for m in sys.modules)))
"""


@pytest.mark.parametrize("argv", [["--help"], ["launch", "--help"], ["env", "--help"],
                                  ["config", "--help"], ["config", "default", "--help"],
                                  ["test", "--help"], ["to-fsdp2", "--help"]])
def test_help_does_not_import_torch(argv: list[str]) -> None:
    proc = subprocess.run([sys.executable, "-c", _PROBE.format(argv=argv)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "usage: accel" in proc.stdout
    assert "TORCH_IMPORTED=False" in proc.stdout


def test_python_dash_m_entry_point(run_accel) -> None:
    result = run_accel("--help")
    assert result.returncode == 0, result
    assert "launch" in result.stdout and "env" in result.stdout
