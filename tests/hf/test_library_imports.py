"""Every name transformers, peft and trl import from Accelerate exists on accel.

Their imports of Accelerate are spread over optional code paths (FSDP, DeepSpeed, quantisation,
CLI) that the training tests do not all reach; a missing name fails only when a user
reaches it. This reads the installed libraries' source (every ``from accelerate... import``
and ``import accelerate...``) and resolves each through the shim.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
from pathlib import Path

LIBRARIES = ("transformers", "peft", "trl")


def _accelerate_imports() -> dict[tuple[str, str | None], str]:
    """``{(module, name or None): first file that imports it}``."""
    found: dict[tuple[str, str | None], str] = {}
    for library in LIBRARIES:
        root = Path(importlib.util.find_spec(library).origin).parent
        for path in sorted(root.rglob("*.py")):
            text = path.read_text(encoding="utf-8", errors="replace")
            if "accelerate" not in text:
                continue
            where = str(path.relative_to(root.parent))
            for node in ast.walk(ast.parse(text)):
                if (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
                        and node.module.split(".")[0] == "accelerate"):
                    for alias in node.names:
                        found.setdefault((node.module, alias.name), where)
                elif isinstance(node, ast.Import):
                    for alias in node.names:
                        if alias.name.split(".")[0] == "accelerate":
                            found.setdefault((alias.name, None), where)
    return found


def _resolves(module_name: str, name: str | None) -> bool:
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        return False
    if name is None or hasattr(module, name):
        return True
    return importlib.util.find_spec(f"{module_name}.{name}") is not None


def test_every_name_the_libraries_import_from_accelerate_exists():
    imports = _accelerate_imports()
    assert len(imports) > 40, "the scan found too few imports: has the libraries' layout changed?"
    missing = sorted(f"{module}:{name} (imported by {where})"
                     for (module, name), where in imports.items() if not _resolves(module, name))
    assert missing == [], "names these libraries import that accel lacks:\n" + "\n".join(missing)
