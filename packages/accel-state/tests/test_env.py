"""The environment contract: declared variables, ACCELERATE_* aliases, parsing helpers."""

from __future__ import annotations

import os

import pytest
from accel_state import ConfigurationError, env


def test_every_variable_is_documented():
    assert env.ENV_VARS
    for var in env.ENV_VARS.values():
        assert var.doc.strip(), var.name


def test_accelerate_alias_is_read_and_ours_wins(monkeypatch):
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")
    assert env.MIXED_PRECISION.get() == "bf16"
    monkeypatch.setenv("ACCEL_MIXED_PRECISION", "fp16")
    assert env.MIXED_PRECISION.get() == "fp16"
    assert env.read("ACCEL_MIXED_PRECISION") == "fp16"


def test_bool_and_int_parsing_errors_name_the_variable(monkeypatch):
    monkeypatch.setenv("ACCELERATE_USE_CPU", "maybe")
    with pytest.raises(ConfigurationError, match="ACCELERATE_USE_CPU='maybe'"):
        env.USE_CPU.get_bool()
    monkeypatch.setenv("ACCELERATE_USE_CPU", "yes")
    assert env.USE_CPU.get_bool() is True
    monkeypatch.setenv("RANK", "1.5")
    with pytest.raises(ConfigurationError, match="RANK='1.5'"):
        env.RANK.get_int()


def test_undeclared_name_is_an_error():
    with pytest.raises(ConfigurationError, match="declare it"):
        env.read("SOMETHING_ELSE")


def test_str_to_bool():
    assert env.str_to_bool("True") == 1 and env.str_to_bool("off") == 0
    assert env.str_to_bool("yes", to_bool=True) is True
    with pytest.raises(ValueError, match="Invalid truth value"):
        env.str_to_bool("perhaps")


def test_parse_helpers(monkeypatch):
    monkeypatch.setenv("MY_FLAG", "1")
    assert env.parse_flag_from_env("MY_FLAG") is True
    assert env.parse_flag_from_env("MISSING_FLAG", default=True) is True
    assert env.parse_choice_from_env("MISSING_CHOICE", "bf16") == "bf16"
    monkeypatch.setenv("NPROC", "4")
    assert env.get_int_from_env(["MISSING_INT", "NPROC"], 1) == 4
    assert env.get_int_from_env(["MISSING_INT"], 7) == 7


def test_patch_and_clear_environment(monkeypatch):
    monkeypatch.setenv("KEEP_ME", "1")
    with env.patch_environment(new_var="x", keep_me="2"):
        assert os.environ["NEW_VAR"] == "x" and os.environ["KEEP_ME"] == "2"
    assert "NEW_VAR" not in os.environ and os.environ["KEEP_ME"] == "1"
    with env.clear_environment():
        assert "KEEP_ME" not in os.environ
    assert os.environ["KEEP_ME"] == "1"


def test_purge_accelerate_environment_on_function_and_class(monkeypatch):
    monkeypatch.setenv("ACCEL_DEBUG_MODE", "0")

    @env.purge_accelerate_environment
    def leaky():
        os.environ["ACCELERATE_USE_CPU"] = "1"
        os.environ["ACCEL_DEBUG_MODE"] = "1"

    leaky()
    assert "ACCELERATE_USE_CPU" not in os.environ
    assert os.environ["ACCEL_DEBUG_MODE"] == "0"

    @env.purge_accelerate_environment
    class Case:
        def test_one(self):
            os.environ["ACCEL_LAUNCHED"] = "1"

    Case().test_one()
    assert "ACCEL_LAUNCHED" not in os.environ


def test_convert_dict_to_env_variables():
    lines = env.convert_dict_to_env_variables({"A": 1, "B C": 2, "D": "x;y", "E": "ok"})
    assert lines == ["A=1\n", "E=ok\n"]


def test_snapshot_lists_only_our_prefixes(monkeypatch):
    monkeypatch.setenv("ACCEL_LAUNCHED", "1")
    monkeypatch.setenv("ACCELERATE_LOG_LEVEL", "INFO")
    snap = env.snapshot()
    assert snap["ACCEL_LAUNCHED"] == "1" and snap["ACCELERATE_LOG_LEVEL"] == "INFO"
    assert "PATH" not in snap


def test_no_other_module_reads_os_environ():
    """DESIGN.md §4: accel_state.env is the only reader of os.environ in accel-state."""
    import pathlib

    import accel_state

    source_dir = pathlib.Path(accel_state.__file__).parent
    readers = [p for p in source_dir.rglob("*.py")
               if "os.environ" in p.read_text() or "getenv" in p.read_text()]
    offenders = [str(p.relative_to(source_dir)) for p in readers
                 if p.relative_to(source_dir).parts[0] != "env"]
    assert readers, "the env package itself must read os.environ"
    assert offenders == []
