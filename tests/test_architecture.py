"""The project's dependency rules, checked on the real source tree.

- import-linter (contracts in pyproject.toml ``[tool.importlinter]``): layers (cudawatch at the
  bottom; analytics; collector, reports and simulator; app on top), the collector free of
  analytics, layers inside analytics, no cycles between sibling modules, private modules kept private.
- No product module uses another module's private names (``from x import _y`` or ``x._y``).
- No product module over ~350 lines.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("cudawatch", "collector", "analytics", "reports", "simulator", "app")
MAX_LINES = 360


def _modules():
    for pkg in PACKAGES:
        yield from sorted((REPO / pkg).rglob("*.py"))


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_import_contracts_hold():
    from importlinter.cli import lint_imports

    assert lint_imports(config_filename=str(REPO / "pyproject.toml"), no_cache=True, no_logo=True) == 0


def _private_uses(path: Path) -> list[str]:
    """``from other import _name`` and ``other_module._name`` where other is one of ours."""
    tree = ast.parse(path.read_text(), filename=str(path))
    own = _module_name(path)
    package = own if path.name == "__init__.py" else own.rpartition(".")[0]
    aliases: dict[str, str] = {}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and node.module.split(".")[0] in PACKAGES:
            for a in node.names:
                full = f"{node.module}.{a.name}"
                aliases[a.asname or a.name] = full
                # A private module of our own package (analytics.rules._common) is fine.
                if a.name.startswith("_") and not a.name.startswith("__") and not (
                        (REPO / Path(*full.split("."))).with_suffix(".py").exists() and node.module == package):
                    out.append(f"{path.relative_to(REPO)}:{node.lineno} from {node.module} import {a.name}")
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in PACKAGES:
                    aliases[a.asname or a.name.split(".")[0]] = a.asname and a.name or a.name.split(".")[0]
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                and node.attr.startswith("_") and not node.attr.startswith("__")):
            target = aliases[node.value.id]
            if target != own:
                out.append(f"{path.relative_to(REPO)}:{node.lineno} {node.value.id}.{node.attr}")
    return out


def test_no_module_uses_another_modules_private_names():
    found = [use for path in _modules() for use in _private_uses(path)]
    assert found == []


def test_the_private_name_check_can_fail(tmp_path, monkeypatch):
    bad = REPO / "app" / "_probe_private_use.py"
    bad.write_text("from analytics.detect import _dedup\nfrom analytics import store\nx = store._secret\n")
    try:
        assert len(_private_uses(bad)) == 2
    finally:
        bad.unlink()


@pytest.mark.parametrize("pkg", PACKAGES)
def test_modules_are_small(pkg):
    big = {str(p.relative_to(REPO)): n for p in sorted((REPO / pkg).rglob("*.py"))
           if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert big == {}
