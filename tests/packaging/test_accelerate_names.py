"""Drop-in, name by name: every public name of every Accelerate 1.15 module imports from the
``accel.`` module of the same path, and every ``accelerate launch`` flag is ours too.

The names come from ``data/accelerate_1_15_names.json``, written by
``tools/accelerate_names.py`` from the real Accelerate 1.15.0 (its docstring says which
names count as public). A failure lists every missing name, per module.

:data:`KNOWN_MISSING` is what is knowingly not there, each with its reason ("module" for a
whole module, "module:name" for one name). An entry that gets built fails
:func:`test_known_missing_entries_are_still_missing`, so the list only shrinks.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

DATA = json.loads((Path(__file__).parent / "data" / "accelerate_1_15_names.json").read_text())

_INTERNAL = "a private helper inside an Accelerate function; accel's version has its own"
#: "module" or "module:name" -> why accel does not have it. Keep it short; it only shrinks.
KNOWN_MISSING: dict[str, str] = {
    **{key: ("bound on Windows only (msvcrt/ctypes console calls); accel's menu reads POSIX "
             "terminals (on Windows: WSL)") for key in (
        "accelerate.commands.menu.cursor:CursorInfo",
        "accelerate.commands.menu.keymap:WIN_CH_BUFFER",
        "accelerate.commands.menu.keymap:WIN_KEYMAP")},
    "accelerate.commands.launch:FORMAT": "rich's log format, bound only when rich is installed",
    "accelerate:rich": ("bound only when rich is installed (rich tracebacks): accel has no "
                        "rich-traceback module"),
}


def accel_path(module: str) -> str:
    return "accel" + module[len("accelerate"):]


def _import(module: str):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # accel.memory_utils warns, as Accelerate's does
        return importlib.import_module(accel_path(module))


def _survey() -> tuple[dict[str, str], dict[str, list[str]]]:
    """(module -> import error, module -> names absent) over the whole data file."""
    broken: dict[str, str] = {}
    absent: dict[str, list[str]] = {}
    for module, info in sorted(DATA["modules"].items()):
        try:
            imported = _import(module)
        except ImportError as exc:
            broken[module] = f"{type(exc).__name__}: {exc}"
            continue
        missing = [n for n in (*info["names"], *info["conditional"])
                   if not hasattr(imported, n)]
        if missing:
            absent[module] = missing
    return broken, absent


def _unexpected(broken: dict[str, str], absent: dict[str, list[str]]) -> dict[str, object]:
    out: dict[str, object] = {m: e for m, e in broken.items() if m not in KNOWN_MISSING}
    for module, names in absent.items():
        if module in KNOWN_MISSING:
            continue
        names = [n for n in names if f"{module}:{n}" not in KNOWN_MISSING]
        if names:
            out[module] = names
    return out


def test_the_data_file_is_accelerate_1_15():
    assert DATA["accelerate_version"] == "1.15.0"
    assert len(DATA["modules"]) > 50 and "accelerate.utils.dataclasses" in DATA["modules"]
    assert len(DATA["launch_flags"]) == 123


def test_every_accelerate_name_imports_from_the_same_accel_module():
    unexpected = _unexpected(*_survey())
    report = "\n".join(f"{accel_path(m)}: {v}" for m, v in unexpected.items())
    total = sum(len(v) if isinstance(v, list) else 1 for v in unexpected.values())
    assert not unexpected, f"{total} of Accelerate 1.15's names are missing under accel:\n{report}"


def test_known_missing_entries_are_still_missing():
    broken, absent = _survey()
    # a whole-module entry stays while the module fails to import or still lacks a name
    gone = set(broken) | set(absent) | {f"{m}:{n}" for m, names in absent.items() for n in names}
    built = sorted(k for k in KNOWN_MISSING if k not in gone and k.split(":")[0] not in broken)
    assert built == [], "these now exist: remove them from KNOWN_MISSING:\n" + "\n".join(built)


def test_known_missing_entries_name_accelerate_modules_and_names():
    stale = []
    for key in KNOWN_MISSING:
        module, _, name = key.partition(":")
        info = DATA["modules"].get(module)
        if info is None or name and name not in (*info["names"], *info["conditional"]):
            stale.append(key)
    assert stale == []


# --- accel launch: every flag of accelerate launch is accepted, or refused with a reason ---

def _our_flags():
    from accel_launch.flags import all_flags

    return {opt: flag for flag in all_flags() for opt in flag.opts}


def _value_for(flag) -> list[str]:
    """A command-line value that asks for something (never one of the flag's inert ones)."""
    return {"switch": [], "multi": ["x"], "int": ["2"], "float": ["0.5"], "bool": ["true"],
            "choice": [flag.choices[-1] if flag.choices else "x"]}.get(flag.kind, ["yes"])


def test_every_accelerate_launch_flag_is_declared_by_accel_launch():
    from accel_launch.launch import launch_command_parser

    declared = {s for a in launch_command_parser()._actions for s in a.option_strings}
    missing = [f["options"][0] for f in DATA["launch_flags"]
               if not set(f["options"]) <= declared]
    assert missing == [], f"accel launch lacks these accelerate launch flags: {missing}"


@pytest.mark.parametrize("options", [f["options"] for f in DATA["launch_flags"]],
                         ids=[f["options"][0] for f in DATA["launch_flags"]])
def test_a_refused_launch_flag_names_itself_and_the_reason(options):
    """Each refused flag (Megatron-LM, TPU, SageMaker, ...) parses, then fails with its own
    reason, not argparse's "unrecognized arguments"."""
    from accel_launch.launch import launch_command_parser
    from accel_launch.resolve import refuse_unsupported
    from accel_state.errors import ConfigurationError

    flag = _our_flags().get(options[0])
    if flag is None or not flag.unsupported:
        pytest.skip("accepted by accel launch")
    for spelling in options:
        args = launch_command_parser().parse_args([spelling, *_value_for(flag), "train.py"])
        with pytest.raises(ConfigurationError) as info:
            refuse_unsupported(args)
        assert flag.name in str(info.value) and flag.unsupported in str(info.value)


def test_megatron_lm_flags_point_at_parallelism_config():
    flags = _our_flags()
    megatron = [f["options"][0] for f in DATA["launch_flags"] if "megatron" in f["options"][0]]
    assert len(megatron) == 28
    assert all("--parallelism_config_tp_size" in flags[o].unsupported for o in megatron)


def test_accel_tpu_config_refuses_with_the_reason():
    result = subprocess.run([sys.executable, "-m", "accel_launch", "tpu-config", "--tpu_name",
                             "x", "--command", "echo hi"], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 2, result.stderr
    assert "invalid choice" not in result.stderr
    assert "TPU" in result.stderr and "not supported" in result.stderr


def test_every_accelerate_cli_command_is_an_accel_command():
    from accel_launch.cli import build_parser, verb_entry_points

    parser = build_parser(verb_entry_points())
    choices = next(a for a in parser._actions if a.dest == "command").choices
    assert set(DATA["cli_commands"]) <= set(choices), sorted(set(DATA["cli_commands"])
                                                             - set(choices))


_SAMPLE = '''
import os
from typing import TYPE_CHECKING, Optional
from .sibling import shared_helper
from . import sibling
if TYPE_CHECKING:
    from .sibling import OnlyForTypes
try:
    from .sibling import optional_name
except ImportError:
    pass
CONSTANT = 1
logger = __import__("logging").getLogger(__name__)
_private = 2
def public_function(): ...
class PublicClass: ...
if __name__ == "__main__":
    script_only = 3
'''


def test_the_tool_counts_definitions_and_own_reexports_only(tmp_path, monkeypatch):
    """tools/accelerate_names.py's rule, on a made-up package: definitions and re-exports of
    the package's own names count; other packages' imports, loggers, submodules, private and
    TYPE_CHECKING / __main__ names do not; a declared name absent at run time is conditional."""
    pkg = tmp_path / "samplepkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "sibling.py").write_text("shared_helper = 1\n")
    (pkg / "mod.py").write_text(_SAMPLE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "tools"))
    import accelerate_names
    mod = importlib.import_module("samplepkg.mod")
    assert accelerate_names.module_names(mod) == {
        "names": ["CONSTANT", "PublicClass", "public_function", "shared_helper"],
        "conditional": ["optional_name"]}
