"""tools/check_module_size.py: fails over 400 lines (issue 40.7), passes on this repository."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TOOL = REPO / "tools" / "check_module_size.py"


def run_tool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True,
                          timeout=60)


def write_module(root: Path, name: str, lines: int) -> str:
    path = root / "packages" / "accel-x" / "src" / "accel_x" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("x = 1\n" * lines)
    return str(path.relative_to(root))


def test_repository_has_no_module_over_the_limit() -> None:
    result = run_tool()
    assert result.returncode == 0, result.stdout + result.stderr


def test_fails_over_400_naming_each_module(tmp_path: Path) -> None:
    write_module(tmp_path, "small.py", 400)
    result = run_tool("--root", str(tmp_path))
    assert result.returncode == 0 and "small.py" not in result.stdout, result.stdout

    medium = write_module(tmp_path, "medium.py", 401)
    big = write_module(tmp_path, "big.py", 801)
    result = run_tool("--root", str(tmp_path))
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        f"{big}: 801 lines > 400: split this module along a seam",
        f"{medium}: 401 lines > 400: split this module along a seam"]
    assert "2 module(s) over 400 lines" in result.stderr
