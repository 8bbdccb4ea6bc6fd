"""The layout holds: one-way layers (import-linter), no import cycles between two modules, imports
at module top, files and functions a reader can take in (docs/architecture.md)."""

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

from tests.support.paths import BENCH, ROOT

PACKAGES = ("dnnplan", "executor", "planner", "profiler", "kernels", "costmodel", "lifecycle", "networks")
MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 60
#: Functions longer than MAX_FUNCTION_LINES where one straight sequence reads better than pieces
#: (each with its reason).
LONG_FUNCTIONS: dict[str, str] = {}


def sources() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def test_the_layers_contract_holds():
    """`lint-imports` checks pyproject's contracts: a wrong-way import fails here."""
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    assert exe, "import-linter is a test dependency (pip install -e '.[test]')"
    proc = subprocess.run([exe, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout, proc.stdout[-3000:]


def test_no_two_modules_import_each_other():
    graph = grimp.build_graph(*PACKAGES, include_external_packages=False)
    pairs = sorted({tuple(sorted((m, other))) for m in graph.modules
                    for other in graph.find_modules_directly_imported_by(m)
                    if other != m and m in graph.find_modules_directly_imported_by(other)})
    assert pairs == []


def _function_level_imports(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for sub in ast.walk(node):
            if isinstance(sub, ast.ImportFrom):
                names = [sub.module or ""] if sub.level == 0 else ["." * sub.level]
            elif isinstance(sub, ast.Import):
                names = [a.name for a in sub.names]
            else:
                continue
            for name in names:
                if name.startswith(".") or name.split(".")[0] in PACKAGES:
                    out.append(f"{path.relative_to(ROOT)}:{sub.lineno} imports {name} inside {node.name}()")
    return out


def test_the_projects_own_modules_are_imported_at_module_top():
    """Deferred imports hide cycles; only heavy optional third-party modules may wait (with a reason)."""
    assert [line for p in sources() for line in _function_level_imports(p)] == []


def test_deferred_third_party_imports_say_why():
    """An import inside a function carries its reason on its line (``# noqa: PLC0415 - why``)."""
    missing = []
    for path in sources():
        lines = path.read_text().splitlines()
        for node in ast.walk(ast.parse("\n".join(lines))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for sub in ast.walk(node):
                    if isinstance(sub, (ast.Import, ast.ImportFrom)) and "#" not in lines[sub.lineno - 1]:
                        missing.append(f"{path.relative_to(ROOT)}:{sub.lineno}")
    assert missing == []


def test_no_file_is_over_400_lines():
    files = sources() + sorted((ROOT / "tests").rglob("*.py")) + sorted((BENCH).rglob("*.py"))
    long = {str(p.relative_to(ROOT)): n for p in files if (n := len(p.read_text().splitlines())) > MAX_FILE_LINES}
    assert long == {}


def test_no_function_is_over_60_lines_without_a_reason():
    long = {}
    for path in sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                key = f"{path.relative_to(ROOT)}:{node.name}"
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES and key not in LONG_FUNCTIONS:
                    long[key] = n
    assert long == {}


@pytest.mark.parametrize("pkg", PACKAGES)
def test_every_package_says_what_it_owns(pkg):
    doc = ast.get_docstring(ast.parse((ROOT / pkg / "__init__.py").read_text()))
    assert doc and len(doc) > 40, f"{pkg}/__init__.py needs a docstring saying what the package owns"
