"""No test module imports another (issue 29): what several share lives in tests/helpers or tests/fakes, and a
directory's fixtures in its conftest.py, which pytest finds without an import. No conftest is imported either,
tests/conftest.py included: its plain functions live in tests/helpers (app.py, serve.py, paths.py, ports.py) and
tests/fakes/gguf_files.py.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent


def _module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_test_module(module: str, root: Path) -> bool:
    """`module` is a file under root named test_*.py or conftest.py (a package of that name would be too)."""
    *_, last = module.split(".")
    if not (last == "conftest" or last.startswith("test_")):
        return False
    base = root.joinpath(*module.split("."))
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def imported_test_modules(path: Path, root: Path = ROOT) -> list[str]:
    """The test modules and conftests that the file at `path` imports, as dotted names."""
    package = _module_name(path, root).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            candidates = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            # `from tests.unit import test_x` imports a module by its name, so each name is a candidate too.
            candidates = [module, *(f"{module}.{alias.name}" for alias in node.names)]
        else:
            continue
        found += [m for m in candidates if _is_test_module(m, root)]
    return found


@pytest.mark.parametrize("source, expected", [
    pytest.param("from tests.unit.test_a import f\n", ["tests.unit.test_a"], id="from-test-module"),
    pytest.param("import tests.unit.test_a\n", ["tests.unit.test_a"], id="import-test-module"),
    pytest.param("from tests.unit import test_a\n", ["tests.unit.test_a"], id="from-package-import-test-module"),
    pytest.param("from .test_a import f\n", ["tests.unit.test_a"], id="relative"),
    pytest.param("from ..ui.conftest import shoot\n", ["tests.ui.conftest"], id="relative-conftest"),
    pytest.param("from tests.ui.conftest import shoot\n", ["tests.ui.conftest"], id="directory-conftest"),
    pytest.param("from tests.conftest import make_settings\n", ["tests.conftest"], id="root-conftest"),
    pytest.param("from tests.helpers.h import test_data\nimport pytest\n", [], id="helpers-and-packages"),
])
def test_the_guard_finds_imports_of_test_modules(tmp_path: Path, source: str, expected: list[str]) -> None:
    for name in ("tests/__init__.py", "tests/conftest.py", "tests/unit/__init__.py", "tests/unit/test_a.py",
                 "tests/ui/__init__.py", "tests/ui/conftest.py", "tests/helpers/__init__.py", "tests/helpers/h.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).touch()
    (tmp_path / "tests/unit/test_b.py").write_text(source)
    assert imported_test_modules(tmp_path / "tests/unit/test_b.py", tmp_path) == expected


def test_no_test_module_imports_another() -> None:
    offenders = {str(path.relative_to(ROOT)): found for path in sorted(TESTS.rglob("*.py"))
                 if (found := imported_test_modules(path))}
    assert offenders == {}, ("these import from a test module or a conftest; move what they share to tests/helpers "
                             f"(or the fixtures to the directory's conftest.py): {offenders}")
