"""Accelerate's ``*_command_parser(subparsers=None)`` builders on accel.commands paths: a
standalone ``accel VERB`` parser, or the verb added to a caller's sub-parsers."""

from __future__ import annotations

import argparse
from pathlib import Path

# Modules, not functions: a function named test_* imported here would be collected by pytest.
import accel.commands.estimate as estimate_cmd
import accel.commands.test as test_cmd
import accel.commands.to_fsdp2 as to_fsdp2_cmd
import pytest

BUILDERS = [
    (test_cmd.test_command_parser, "test", [], {"config_file": None}, test_cmd.test_command),
    (estimate_cmd.estimate_command_parser, "estimate-memory", ["pkg.mod:build"],
     {"model_name": "pkg.mod:build", "dtypes": ["float32", "float16", "int8", "int4"],
      "library_name": None, "trust_remote_code": False}, estimate_cmd.estimate_command),
    (to_fsdp2_cmd.to_fsdp2_command_parser, "to-fsdp2", ["--config_file", "c.yaml"],
     {"config_file": "c.yaml", "output_file": None, "overwrite": False},
     to_fsdp2_cmd.to_fsdp2_command),
]


@pytest.mark.parametrize(("build", "verb", "argv", "expected", "handler"), BUILDERS)
def test_standalone_builders_parse_like_the_accel_verb(build, verb, argv, expected,
                                                       handler) -> None:
    parser = build()
    assert parser.prog == f"accel {verb}"
    args = parser.parse_args(argv)
    assert {k: getattr(args, k) for k in expected} == expected
    assert args.func is handler
    assert build() is not parser  # a fresh parser per call


@pytest.mark.parametrize(("build", "verb", "argv", "expected", "handler"), BUILDERS)
def test_builders_add_their_verb_to_given_subparsers(build, verb, argv, expected,
                                                     handler) -> None:
    root = argparse.ArgumentParser(prog="tool")
    sub = root.add_subparsers()
    parser = build(sub)
    assert sub.choices[verb] is parser
    args = root.parse_args([verb, *argv])
    assert {k: getattr(args, k) for k in expected} == expected and args.func is handler


def test_to_fsdp2_parser_runs_the_conversion(tmp_path: Path) -> None:
    from accel.commands.config import load_config_from_file

    fsdp1, out = tmp_path / "fsdp1.yaml", tmp_path / "fsdp2.yaml"
    fsdp1.write_text("distributed_type: FSDP\nnum_processes: 2\nfsdp_config:\n"
                     "  fsdp_sharding_strategy: SHARD_GRAD_OP\n  fsdp_use_orig_params: true\n")
    args = to_fsdp2_cmd.to_fsdp2_command_parser().parse_args(
        ["--config_file", str(fsdp1), "--output_file", str(out)])
    assert args.func(args) == 0
    fsdp = load_config_from_file(out).raw["fsdp_config"]
    assert fsdp == {"fsdp_version": 2, "fsdp_reshard_after_forward": False}
    with pytest.raises(SystemExit):  # --config_file is required, as in Accelerate
        to_fsdp2_cmd.to_fsdp2_command_parser().parse_args([])
