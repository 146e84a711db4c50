"""Accelerate's ``accelerate.test_utils.examples`` path: checks that a ``complete_*`` example
script contains the code each ``examples/by_feature`` script adds to ``nlp_example.py``.

``compare_against_test`` is the entry point (it returns the feature lines the complete
script lacks); the other two cut a function out of a script and drop comments/blank lines.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["clean_lines", "compare_against_test", "get_function_contents_by_name"]

_FUNCTIONS = ("training_function", "main")
#: The template's dataloader line, which every feature script swaps for its own.
_DL_LINE = "train_dataloader, eval_dataloader = get_dataloaders(accelerator, batch_size)\n"
_MOCK_MARK = "TESTING_MOCKED_DATALOADERS"


def get_function_contents_by_name(lines: list[str], name: str) -> list[str] | None:
    """The lines of ``def <name>`` up to the next section (``def main`` after
    ``training_function``, ``if __name__`` after ``main``); None when that never comes."""
    if name not in _FUNCTIONS:
        raise ValueError(f"Incorrect function name passed: {name}, choose either 'main' or "
                         "'training_function'")
    end = "def main" if name == "training_function" else "if __name__"
    found: list[str] = []
    for line in lines:
        if not found:
            if f"def {name}" in line:
                found.append(line)
            continue
        if end in line:
            return found
        found.append(line)
    return None


def clean_lines(lines: list[str]) -> list[str]:
    """``lines`` without comment lines (``#`` after indentation) and bare newlines."""
    return [line for line in lines if not line.lstrip().startswith("#") and line != "\n"]


def _read(path: str | os.PathLike[str]) -> list[str]:
    with open(path) as fh:
        return fh.readlines()


def _section(lines: list[str], name: str) -> list[str]:
    return clean_lines(get_function_contents_by_name(lines, name) or [])


def _new_in_feature(feature: list[str], template: list[str]) -> list[str]:
    """Feature lines the template lacks; a mock marker line also drops the line after it
    (its ``config["num_epochs"] = 2``). The last line is never looked at, as in Accelerate."""
    new: list[str] = []
    lines = iter(feature)
    for _ in range(len(feature) - 1):
        line = next(lines, None)
        if line is None:
            break
        if line in template or line.lstrip() == _DL_LINE:
            continue
        if _MOCK_MARK in line:
            next(lines, None)
        else:
            new.append(line)
    return new


def compare_against_test(base_filename: str | os.PathLike[str],
                         feature_filename: str | os.PathLike[str], parser_only: bool,
                         secondary_filename: str | os.PathLike[str] | None = None) -> list[str]:
    """The lines ``feature_filename`` adds to ``examples/nlp_example.py`` (in the working
    directory) that ``base_filename`` does not have: compares ``main()`` when
    ``parser_only``, else ``training_function()``. ``secondary_filename`` is the base
    script's own template (e.g. ``cv_example.py``), whose lines are then not counted."""
    name = "main" if parser_only else "training_function"
    template_lines = _read(Path("examples", "nlp_example.py").absolute())
    template = _section(template_lines, name)
    feature_new = _new_in_feature(_section(_read(feature_filename), name), template)
    base_new = [line for line in _section(_read(base_filename), name)
                if line not in template and line.lstrip() != _DL_LINE and _MOCK_MARK not in line]
    diff = [line for line in feature_new if line not in base_new]
    if secondary_filename is not None:
        secondary = _section(_read(secondary_filename), name)
        only_template = [line for line in template_lines if line not in secondary]
        diff = [line for line in diff if line not in only_template]
    return diff
